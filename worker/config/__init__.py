"""The worker's configuration: one set of pydantic models (``models``), where each value came
from (``sources``: file, environment, flags, and the errors that name them), the token and the
secrets kept out of children (``token``, ``secrets``), and what a ``SIGHUP`` reload may apply
(``reload``)."""
