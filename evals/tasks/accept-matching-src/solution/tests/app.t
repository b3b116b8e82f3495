expect v2
