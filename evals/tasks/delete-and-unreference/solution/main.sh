. ./util.sh
main
