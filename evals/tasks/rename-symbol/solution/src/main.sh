. ./src/data.sh
load_data | wc -l
