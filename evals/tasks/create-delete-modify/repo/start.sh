run --config old.cfg
