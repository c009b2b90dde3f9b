"""The worker's configuration: one set of pydantic models (``models``), where each value came
from (``sources``: file, environment, flags, and the errors that name them), the token and the
secrets kept out of children (``token``, ``secrets``), and what a ``SIGHUP`` reload may apply
(``reload``).

Its modules may touch the configuration file, the environment and the token file (reads), and the
worker's own environment block (:mod:`~worker.config.secrets`); of the rail they use only
:mod:`tracker_client.errors` and :mod:`tracker_client.validation`, and nothing of the daemon or the
plugins.
"""
