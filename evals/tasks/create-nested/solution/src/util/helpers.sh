#!/bin/sh
trim() {
    echo "$1" | sed "s/^ *//;s/ *$//"
}
