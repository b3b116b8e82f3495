load_data() {
    cat data.txt
}
