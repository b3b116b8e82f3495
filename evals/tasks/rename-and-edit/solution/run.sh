. ./lib/helpers.sh
greet
