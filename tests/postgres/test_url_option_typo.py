"""A misspelt rail option on a PostgreSQL URL is refused before connecting, on one line, naming
the option it most likely meant (libpq knows only its own parameters)."""

from __future__ import annotations

import pytest

from tracker_client.errors import ConfigError
from tracker_client.factory import open_tracker

pytestmark = pytest.mark.anyio


async def test_a_misspelt_rail_option_names_the_one_meant() -> None:
    # port 1: nothing listens there, so reaching the server would be another error
    with pytest.raises(ConfigError) as refused:
        await open_tracker("postgresql://u@127.0.0.1:1/work?pool_sise=3")
    message = str(refused.value)
    assert message == (
        "tracker url 'postgresql://u@127.0.0.1:1/work?pool_sise=3': invalid URI query "
        "parameter: \"pool_sise\" (did you mean the rail's option 'pool_size'?)"
    )


async def test_an_unknown_parameter_near_no_rail_option_gets_no_hint() -> None:
    with pytest.raises(ConfigError) as refused:
        await open_tracker("postgresql://u@127.0.0.1:1/work?zzz=3")
    assert str(refused.value).endswith('invalid URI query parameter: "zzz"')
