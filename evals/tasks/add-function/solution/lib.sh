#!/bin/sh
# math helpers

add() {
    echo $(($1 + $2))
}

mul() {
    echo $(($1 * $2))
}
