"""`python -m trainjobs.cli`: the `trainjobs` command (how a worker starts from `trainjobs up`)."""

from trainjobs.cli import main

main()
