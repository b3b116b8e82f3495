run --config new.cfg
