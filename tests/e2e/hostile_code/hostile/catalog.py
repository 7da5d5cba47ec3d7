from pydantic import Field
from wavesort.catalog import ClassifierParams

from trainjobs.contract.catalog import ModelEntry


class HostileParams(ClassifierParams):
    attack: str = Field("probe", pattern="^(probe|fork|fill)$")
    targets: dict[str, str] = Field(default_factory=dict)  # what the test lets it aim at


HOSTILE = ModelEntry(HostileParams, "hostile.attacks:build", "wavesort's classifier, built by a hostile hand")
