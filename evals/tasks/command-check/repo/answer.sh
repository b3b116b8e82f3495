#!/bin/sh
echo 41
