#!/bin/sh
# math helpers

add() {
    echo $(($1 + $2))
}
