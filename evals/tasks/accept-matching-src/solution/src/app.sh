#!/bin/sh
echo "v2"
