module eppkit.local/pause

go 1.22
