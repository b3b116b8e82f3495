expect v1
