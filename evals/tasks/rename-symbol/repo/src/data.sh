fetch_data() {
    cat data.txt
}
