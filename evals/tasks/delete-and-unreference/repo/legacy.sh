legacy() { :; }
