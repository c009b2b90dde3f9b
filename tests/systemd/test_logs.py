"""Logging formats (journald, plain, JSON, rich), format detection and secret redaction."""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import subprocess
import sys
import textwrap

import pytest

from worker import logs
from worker.logs import (
    JournalFormatter,
    PlainFormatter,
    RedactingFilter,
    configure_logging,
    detect_format,
    stream_is_journal,
)

log = logging.getLogger("backlog_worker.test")


@pytest.fixture
def captured():
    """Configure logging into a StringIO; undo it afterwards."""
    root = logging.getLogger()
    saved = (root.level, logging.getLogger("backlog_worker").level)
    stream = io.StringIO()
    installed: list[logging.Handler] = []

    def configure(fmt: str = "plain", level: str = "DEBUG", **kwargs) -> io.StringIO:
        installed.append(configure_logging(level, fmt, stream=stream, **kwargs))
        return stream

    yield configure
    for handler in installed:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(saved[0])
    logging.getLogger("backlog_worker").setLevel(saved[1])


def _record(level=logging.INFO, msg="task claimed", args=None, exc_info=None, **extra):
    record = logging.LogRecord("backlog_worker.daemon", level, __file__, 1, msg, args, exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


# -- journald --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "prefix"),
    [
        (logging.DEBUG, "<7>"),
        (logging.INFO, "<6>"),
        (logging.WARNING, "<4>"),
        (logging.ERROR, "<3>"),
        (logging.CRITICAL, "<2>"),
    ],
)
def test_journal_lines_carry_the_syslog_priority(level, prefix):
    line = JournalFormatter().format(_record(level, action="task_claimed"))
    assert line == f"{prefix}backlog_worker.daemon: task claimed action=task_claimed"


def test_journal_fields_are_key_value_with_action_and_ids_first():
    record = _record(
        role="coder",
        zeta="last",
        run_id="r-1",
        task_id="t-1",
        action="task_claimed",
        attempt=2,
        note="two words",
        empty="",
        missing=None,
    )
    assert JournalFormatter().format(record) == (
        "<6>backlog_worker.daemon: task claimed action=task_claimed task_id=t-1 run_id=r-1 "
        'role=coder attempt=2 empty="" note="two words" zeta=last'
    )


def test_journal_keeps_a_traceback_on_one_line():
    try:
        raise RuntimeError("executor exploded")
    except RuntimeError:
        record = _record(logging.ERROR, "run failed", exc_info=sys.exc_info(), action="run_failed")
    line = JournalFormatter().format(record)
    assert "\n" not in line
    assert line.startswith("<3>backlog_worker.daemon: run failed action=run_failed Traceback")
    assert "RuntimeError: executor exploded" in line
    assert "\\n" in line  # newlines escaped, not dropped


def test_multiline_messages_stay_one_line():
    line = JournalFormatter().format(_record(msg="first\nsecond"))
    assert line == "<6>backlog_worker.daemon: first\\nsecond"


def test_plain_lines_have_utc_time_level_and_fields():
    record = _record(action="task_claimed", task_id="t-1")
    record.created = 1_700_000_000.25
    record.msecs = 250.0
    assert PlainFormatter().format(record) == (
        "2023-11-14T22:13:20.250Z INFO backlog_worker.daemon: task claimed "
        "action=task_claimed task_id=t-1"
    )


# -- detection -------------------------------------------------------------------------------------


def test_journal_stream_is_detected_by_device_and_inode(tmp_path):
    with open(tmp_path / "stderr", "w") as stream:
        st = os.fstat(stream.fileno())
        assert stream_is_journal(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        assert detect_format(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}) == "journal"
        # Inherited from a parent whose stderr went elsewhere: not ours.
        other = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"}
        assert not stream_is_journal(stream, other)
        assert detect_format(stream, other) == "plain"
        assert detect_format(stream, {"JOURNAL_STREAM": "garbage"}) == "plain"
        assert detect_format(stream, {}) == "plain"


def test_a_tty_gets_rich_and_a_stringio_gets_plain():
    primary, secondary = os.openpty()
    try:
        with open(secondary, "w", closefd=False) as tty:
            assert detect_format(tty, {}) == "rich"
    finally:
        os.close(primary)
        os.close(secondary)
    assert detect_format(io.StringIO(), {"JOURNAL_STREAM": "1:2"}) == "plain"


JOURNAL_CHILD = textwrap.dedent(
    """
    import logging
    from worker.logs import configure_logging
    configure_logging("INFO", "auto")
    logging.getLogger("backlog_worker.daemon").warning(
        "tracker slow", extra={"action": "tracker_slow", "task_id": "t-9"}
    )
    """
)


def test_a_process_whose_stderr_is_the_journal_writes_journal_lines(tmp_path):
    stderr_path = tmp_path / "journal"
    with open(stderr_path, "w") as stderr:
        st = os.fstat(stderr.fileno())
        env = {
            **os.environ,
            "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        subprocess.run(
            [sys.executable, "-c", JOURNAL_CHILD], stderr=stderr, env=env, check=True, timeout=30
        )
    assert stderr_path.read_text() == (
        "<4>backlog_worker.daemon: tracker slow action=tracker_slow task_id=t-9\n"
    )


# -- configure_logging -----------------------------------------------------------------------------


def test_configure_plain_end_to_end(captured):
    stream = captured("plain", "INFO")
    log.debug("hidden", extra={"action": "noise"})
    log.info("claimed %s", "t-1", extra={"action": "task_claimed", "task_id": "t-1"})
    [line] = stream.getvalue().splitlines()
    assert line.endswith(" INFO backlog_worker.test: claimed t-1 action=task_claimed task_id=t-1")


def test_configure_json_lines(captured):
    stream = captured("json")
    log.info("claimed", extra={"action": "task_claimed", "task_id": "t-1", "meta": {"n": 1}})
    logging.getLogger("backlog_worker.other").warning("no action here")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["action"] == "task_claimed"
    assert first["task_id"] == "t-1"
    assert first["meta"] == {"n": 1}  # structured values stay structured
    assert first["level"] == "info"
    assert first["logger"] == "backlog_worker.test"
    assert first["message"] == "claimed"
    assert first["ts"].endswith("+00:00")
    assert second["action"] is None  # the key is always there
    assert second["level"] == "warning"


def test_configure_rich_renders_message_and_fields(captured):
    stream = captured("rich")
    log.warning("slot stuck", extra={"action": "slot_stuck", "task_id": "t-7"})
    text = stream.getvalue()
    assert "slot stuck" in text
    assert "action=slot_stuck" in text
    assert "task_id=t-7" in text


def test_configure_twice_replaces_the_handler(captured):
    captured("plain")
    stream = captured("json")
    ours = [h for h in logging.getLogger().handlers if getattr(h, logs._HANDLER_MARK, None)]
    assert len(ours) == 1
    log.info("once", extra={"action": "x"})
    assert len(stream.getvalue().splitlines()) == 1


def test_chatty_libraries_stay_quiet_unless_debug(captured):
    stream = captured("plain", "INFO")
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1/")
    assert stream.getvalue() == ""
    captured("plain", "DEBUG")
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1/")
    assert "HTTP Request" in stream.getvalue()


@pytest.mark.parametrize(
    ("level", "fmt", "message"),
    [
        ("INFO", "xml", "unknown log format 'xml': expected one of auto, rich, plain, journal"),
        ("LOUD", "plain", "unknown log level 'LOUD'"),
    ],
)
def test_bad_level_or_format_is_refused_by_name(level, fmt, message):
    with pytest.raises(ValueError, match=message):
        configure_logging(level, fmt, stream=io.StringIO())


# -- redaction -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["plain", "journal", "json", "rich"])
def test_secrets_never_reach_the_output(captured, fmt):
    lease_token = secrets.token_hex(32)
    api_token = "nt_" + secrets.token_urlsafe(24)
    stream = captured(fmt, secrets=[api_token])
    log.info("claimed with lease %s", lease_token, extra={"action": "task_claimed"})
    log.info(
        "sending",
        extra={
            "action": "request",
            "token": lease_token.upper(),
            "headers": {"Authorization": f"Bearer {api_token}"},
            "url": f"http://127.0.0.1:9/x?token={api_token}",
        },
    )
    log.info("Authorization: Bearer abc.def-ghi", extra={"action": "request"})
    try:
        raise RuntimeError(f"server rejected {api_token} for lease {lease_token}")
    except RuntimeError:
        log.exception("report failed", extra={"action": "report_failed"})
    text = stream.getvalue()
    for secret in (lease_token, lease_token.upper(), api_token, "abc.def-ghi"):
        assert secret not in text
    assert text.count(logs.REDACTED) >= 6
    assert "report failed" in text and "RuntimeError" in text  # the record itself survives


def test_redaction_leaves_ordinary_text_and_short_hex_alone():
    redactor = RedactingFilter()
    run_id = "0195f1c2-7a3b-7d4e-8f00-123456789abc"
    digest40 = "a" * 40
    assert redactor.redact(f"run {run_id} commit {digest40}") == f"run {run_id} commit {digest40}"
    assert redactor.redact("x" + "b" * 64) == "x" + logs.REDACTED
    assert redactor.redact("c" * 65) == "c" * 65  # not token-shaped


def test_short_secrets_are_not_registered():
    redactor = RedactingFilter(["ab", "abcd"])
    assert redactor.redact("ab abcd") == f"ab {logs.REDACTED}"


# Each kind of secret the filter masks, in each place of a record it may hide, including the
# places the filter's cheap pre-checks look at first (a short field, exactly 64 characters, a
# mixed-case scheme, a value that is not a string).
_LEASE = "0123456789abcdef" * 4  # a lease token: 64 hex digits
_API = "nt_" + "k" * 29  # a registered secret (the api token), shorter than 64 characters


class _Shown:
    """A field value whose ``str()`` shows a secret."""

    def __str__(self) -> str:
        return f"shown {_LEASE}"


@pytest.mark.parametrize(
    ("secret", "value"),
    [
        (_LEASE, _LEASE),  # exactly 64 characters: the shortest text the token check reads
        (_LEASE.upper(), _LEASE.upper()),
        (_LEASE, f"token={_LEASE};"),
        (_API, _API),  # a registered secret in a short field
        (_API, f"?t={_API}"),
        ("abc.def", "BeArEr abc.def"),  # the scheme in any case
        ("abc.def", "bearer\tabc.def"),
        ("xyz9", "Authorization: BEARER xyz9"),
        (_LEASE, [f"lease {_LEASE}"]),  # not a string: its text is checked
        (_API, {"headers": {"authorization": f"Bearer {_API}"}}),
        (_LEASE, _Shown()),
    ],
)
def test_every_secret_kind_is_masked_in_each_place(secret, value):
    redactor = RedactingFilter([_API])
    record = _record(
        msg="sent %s", args=(value,), exc_info=None, action="request", field=value, other=value
    )
    record.exc_text = f"Traceback: {value}"
    record.stack_info = f"Stack: {value}"
    assert redactor.filter(record) is True
    for text in (record.msg, str(record.field), str(record.other), record.exc_text):
        assert secret not in text and logs.REDACTED in text
    assert secret not in record.stack_info


def test_a_text_found_clean_is_masked_once_its_secret_is_registered():
    # The filter remembers texts it found clean (a worker's lines repeat their values); a
    # secret registered later must still be masked in a text remembered before it.
    redactor = RedactingFilter()
    text = f"role={_API}"
    assert redactor.redact(text) == text
    assert redactor.redact(text) == text  # now answered from what it remembers
    redactor.add(_API)
    assert redactor.redact(text) == f"role={logs.REDACTED}"
    record = _record(action="run_start", role=_API)
    redactor.filter(record)
    assert record.role == logs.REDACTED


def test_remembered_clean_texts_and_shown_values_stay_bounded():
    redactor = RedactingFilter()
    formatter = PlainFormatter()
    for i in range(logs._CLEAN_MAX + 10):
        assert redactor.redact(f"run-{i}") == f"run-{i}"
        assert f"run_id=run-{i}" in formatter.format(_record(run_id=f"run-{i}"))
    assert len(redactor._state[1]) <= logs._CLEAN_MAX
    assert len(logs._SHOWN) <= logs._SHOWN_MAX
    long = "x" * (logs._CLEAN_LEN + 1)  # long texts (tracebacks) are not remembered
    assert redactor.redact(long) == long and long not in redactor._state[1]


def test_lines_without_call_sites_keep_everything_a_format_shows(captured, monkeypatch):
    monkeypatch.setattr(logging, "_srcfile", logging._srcfile)  # restored after the test
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    logging.getLogger().addHandler(keep)
    try:
        for fmt in ("plain", "json", "journal"):
            stream = captured(fmt, level="INFO", worker=True)
            logs.omit_call_sites()
            log.info("transitioned %s -> %s", "todo", "done", extra={"action": "run_transitioned"})
            line = stream.getvalue().splitlines()[-1]
            assert "transitioned todo -> done" in line and "run_transitioned" in line
    finally:
        logging.getLogger().removeHandler(keep)
    # The records carry no call site: nothing walked the caller's frames to find it.
    assert {(r.pathname, r.lineno, r.funcName) for r in seen} == {
        ("(unknown file)", 0, "(unknown function)")
    }


def test_fields_without_a_secret_are_left_as_they_were():
    redactor = RedactingFilter([_API])
    meta = {"stage": "todo", "n": 3}
    record = _record(action="run_start", attempt=2, took=0.5, meta=meta, task_id="t-1")
    redactor.filter(record)
    assert record.meta is meta  # a structured value stays itself, not its text
    assert (record.attempt, record.took, record.task_id) == (2, 0.5, "t-1")
    assert record.msg == "task claimed" and record.args is None


def test_plain_lines_in_one_second_share_its_timestamp_and_keep_their_own_millis():
    formatter = PlainFormatter()
    first, second = _record(), _record()
    first.created, first.msecs = 1_800_000_000.123, 123.0
    second.created, second.msecs = 1_800_000_000.987, 987.0
    later = _record()
    later.created, later.msecs = 1_800_000_001.004, 4.0
    lines = [formatter.format(r) for r in (first, second, later)]
    assert lines[0].startswith("2027-01-15T08:00:00.123Z INFO ")
    assert lines[1].startswith("2027-01-15T08:00:00.987Z INFO ")
    assert lines[2].startswith("2027-01-15T08:00:01.004Z INFO ")


def test_records_of_one_shape_keep_their_own_values_and_every_extra_is_scrubbed():
    redactor, formatter = RedactingFilter([_API]), PlainFormatter()
    lines = []
    for i, extra in enumerate(
        [
            {"zeta": "z1", "alpha": "a1", "_hidden": f"k={_API}"},
            {"zeta": "z2", "alpha": "a2", "_hidden": f"k={_API}"},  # the same shape again
            {"alpha": "a3", "zeta": "z3", "_hidden": f"k={_API}"},  # its keys in another order
        ]
    ):
        record = _record(action="run_start", task_id=f"t-{i}", **extra)
        redactor.filter(record)
        assert record._hidden == f"k={logs.REDACTED}"  # scrubbed, though never shown
        lines.append(formatter.format(record))
    for i, line in enumerate(lines):
        assert line.endswith(f"action=run_start task_id=t-{i} alpha=a{i + 1} zeta=z{i + 1}")
    assert _API not in "".join(lines)


class _CountingText(io.TextIOWrapper):
    flushes = 0

    def flush(self) -> None:
        type(self).flushes += 1
        super().flush()


@pytest.fixture
def into():
    """Configure logging into a given stream; undo it afterwards."""
    root = logging.getLogger()
    saved = (root.level, logging.getLogger("backlog_worker").level)
    installed: list[logging.Handler] = []
    yield lambda stream: installed.append(configure_logging("INFO", "plain", stream=stream))
    for handler in installed:
        root.removeHandler(handler)
    root.setLevel(saved[0])
    logging.getLogger("backlog_worker").setLevel(saved[1])


def test_a_stream_that_writes_each_line_through_is_not_flushed_again(into, tmp_path):
    path = tmp_path / "log"
    raw = open(path, "wb", buffering=0)  # noqa: SIM115 (closed below)
    stream = _CountingText(raw, encoding="utf-8", write_through=True)  # as Python's stderr
    try:
        into(stream)
        _CountingText.flushes = 0
        for i in range(3):
            log.info("line %d", i, extra={"action": "x"})
            # Every line is in the file as it is logged: nothing waits in a buffer.
            assert path.read_text().count("\n") == i + 1
        assert _CountingText.flushes == 0
    finally:
        stream.detach()
        raw.close()


def test_a_buffered_file_gets_each_line_as_it_is_logged(into, tmp_path):
    path = tmp_path / "log"
    with open(path, "w", encoding="utf-8") as stream:  # block-buffered: flushed per line
        into(stream)
        for i in range(3):
            log.info("line %d", i, extra={"action": "x"})
            assert path.read_text().count("\n") == i + 1
        handler = logging.getLogger().handlers[-1]
        assert isinstance(handler, logging.StreamHandler)
        raw = open(path, "ab", buffering=0)  # noqa: SIM115 (closed below)
        through = _CountingText(raw, encoding="utf-8", write_through=True)
        _CountingText.flushes = 0
        handler.setStream(through)  # re-decided: this one writes each line through
        log.info("through", extra={"action": "x"})
        assert path.read_text().count("\n") == 4 and _CountingText.flushes == 0
        through.detach()
        raw.close()


def test_numbers_are_shown_bare_as_python_writes_them():
    line = PlainFormatter().format(
        _record(attempt=3, duration_s=0.003, tiny=1e-05, big=float("inf"))
    )
    assert line.endswith("attempt=3 big=inf duration_s=0.003 tiny=1e-05")
