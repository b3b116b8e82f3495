util() { :; }
