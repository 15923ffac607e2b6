"""What every run shares: its state in one object (``state``), its batched reads and the cluster
lookups they answer (``reads``), its bounded waits (``poll``), a file's text (``files``), one run
per lab at a time (``runlock``), the preflight (``preflight``, ``checks``), its last words
(``summary``), a host's kind and a node's knobs (``target``), pyinfra's overhead made cheaper
(``overhead``: its planning and its exit)."""
