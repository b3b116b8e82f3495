. ./src/data.sh
fetch_data | wc -l
