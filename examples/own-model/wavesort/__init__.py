"""wavesort: an example of a team's own model and dataset for trainjobs.

`wavesort.catalog` says what the service validates (torch-free); `wavesort.build` builds the
objects (torch). The same package trains as a code archive (`trainjobs submit --code`) or, once
pip-installed on every host, as a plugin (its entry points are in pyproject.toml)."""
