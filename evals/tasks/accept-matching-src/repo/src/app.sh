#!/bin/sh
echo "v1"
