. ./util.sh
. ./legacy.sh
main
