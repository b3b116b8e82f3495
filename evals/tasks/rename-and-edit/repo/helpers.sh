greet() {
    echo hi
}
