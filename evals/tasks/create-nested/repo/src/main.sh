echo main
