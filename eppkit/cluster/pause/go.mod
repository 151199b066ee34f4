module eppkit-pause

go 1.22
