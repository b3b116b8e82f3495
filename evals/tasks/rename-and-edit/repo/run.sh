. ./helpers.sh
greet
