#!/usr/bin/env python3
"""A fake ``nullclaw`` CLI reproducing the real CLI's behaviours (no LLM, no network).

Config is read like the real one, from ``$HOME/.nullclaw/config.json`` (HOME unset, file missing,
invalid JSON, legacy keys, no default model, temperature range: all exit 0 with only stderr).
``reliability.provider_retries == 0`` switches the answer to streaming (chunks flushed one by
one). What the "provider" does is chosen by environment variables the test passes through:

FAKE_NULLCLAW_MODE    ok (default) | http500 | http400 | http429 | nonjson | down | no_curl |
                      timeout | panic | hang | slow | huge | binary | selfkill | empty_answer
FAKE_NULLCLAW_ANSWER  the answer text (default: "Answer: <first 60 chars of the prompt>")
FAKE_NULLCLAW_DELAY   seconds per streamed chunk / before a slow answer (default 0.05 / 1)
FAKE_NULLCLAW_SIZE    bytes of a huge answer
FAKE_NULLCLAW_PIDFILE where "hang" writes "<role> <pid>" lines: itself, its curl child, its
                      shell-tool child (both children survive the parent's death; with
                      FAKE_NULLCLAW_CHILD_IGNORES_TERM=1 they also ignore SIGTERM)
FAKE_NULLCLAW_RECORD  where to write {"argv", "env", "cwd", "message", "prompt"} as JSON ("message"
                      is -m; "prompt" what the model works on: the file -m points at, if any)
FAKE_NULLCLAW_LEAK_ENV    names (comma-separated) whose values it prints on stdout and stderr
FAKE_NULLCLAW_VERSION version subcommand behaviour: ok (default) | fail | hang
FAKE_NULLCLAW_LEAK_KEY=1  print NULLCLAW_API_KEY on stderr (an over-verbose diagnostic)
FAKE_NULLCLAW_USAGE   "prompt,completion" tokens of its model call: logged on stderr as nullclaw
                      does when the config's diagnostics.log_llm_io is on (twice: two calls)
FAKE_NULLCLAW_USAGE_FOOTER=1  end the answer with nullclaw's "[usage] ... total=N" footer
FAKE_NULLCLAW_MCP_CALLS   a JSON list of {"server", "tool", "arguments"}: before answering, start
                      each server the config lists under mcp_servers as nullclaw does (its own
                      argv, an environment of PATH/HOME/... plus the entry's "env"), speak
                      newline-delimited JSON-RPC to it (initialize, tools/list, tools/call) and
                      write every tools/call answer to FAKE_NULLCLAW_MCP_RECORD (JSON)
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

VERSION = "nullclaw 2026.2.26"
USAGE = "Usage: nullclaw <command> [options]\nCommands: agent, gateway, version, status, doctor\n"
KNOWN = {
    "gateway", "service", "status", "onboard", "doctor", "cron", "channel", "skills",
    "hardware", "migrate", "memory", "workspace", "capabilities", "models", "auth", "update",
}  # fmt: skip
CHILD = (
    "import os, signal, sys, time\n"
    "if os.environ.get('FAKE_NULLCLAW_CHILD_IGNORES_TERM') == '1':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)


def err(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def out(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def load_config():
    """(config dict or None when there is no usable default model, list of stderr lines)."""
    home = os.environ.get("HOME")
    if not home:
        return None, "no_home"
    path = os.path.join(home, ".nullclaw", "config.json")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return {}, None
    try:
        data = json.loads(raw)
    except ValueError:
        err("Warning: failed to parse config.json: SyntaxError")
        return {}, None
    if not isinstance(data, dict):
        err("Warning: failed to parse config.json: UnexpectedToken")
        return {}, None
    for key in ("default_provider", "default_model"):
        if key in data:
            return None, f"Config error: top-level {key} is not supported; use agents.defaults"
    return data, None


def agent(args):
    message = None
    session = provider = model = temperature = None
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in ("-m", "--message", "-s", "--session", "--provider", "--model", "--temperature"):
            if i + 1 >= len(args):
                err(f"error(agent): Missing value for {flag}")
                return 0
            value = args[i + 1]
            if flag in ("-m", "--message"):
                message = value
            elif flag in ("-s", "--session"):
                session = value
            elif flag == "--provider":
                provider = value
            elif flag == "--model":
                model = value
            else:
                try:
                    temperature = float(value)
                except ValueError:
                    err(f"error(agent): Invalid --temperature value: {value}")
                    return 0
            i += 2
        else:
            i += 1  # unknown flags are silently ignored
    config, problem = load_config()
    if problem == "no_home":
        err("error(agent): No config found. Run `nullclaw onboard` first.")
        return 0
    if problem:
        err(problem)
        return 0
    primary = ((config.get("agents") or {}).get("defaults") or {}).get("model") or {}
    primary = primary.get("primary") if isinstance(primary, dict) else None
    if primary and "/" in primary:
        cfg_provider, cfg_model = primary.split("/", 1)
    elif provider and model:
        cfg_provider, cfg_model = provider, model
    else:
        err("No default model configured. Run `nullclaw onboard` or set agents.defaults.model.")
        return 0
    provider = provider or cfg_provider
    model = model or cfg_model
    if temperature is None:
        temperature = config.get("default_temperature", 0.7)
    if not 0.0 <= float(temperature) <= 2.0:
        err("Config error: temperature must be between 0.0 and 2.0.")
        return 0
    backend = (config.get("memory") or {}).get("backend", "markdown")
    err(f"info(memory): memory plan resolved backend={backend}")
    prompt = read_pointed_file(message)
    record = os.environ.get("FAKE_NULLCLAW_RECORD")
    if record:
        with open(record, "w", encoding="utf-8") as fh:
            json.dump(
                {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "prompt": prompt,
                 "message": message, "prompt_file": PROMPT_FILE, "provider": provider,
                 "model": model, "config": config},
                fh,
            )  # fmt: skip
    mcp_calls(config)
    CONFIG.update(config)
    if message is None:
        out("nullclaw agent: interactive mode. Type 'exit' to quit.\n> ")
        for line in sys.stdin:
            if line.strip() in ("exit", "quit"):
                break
        return 0
    if message.startswith("/"):
        out("Available commands: /new /model /bash /exec /help\n")
        return 0
    streaming = (config.get("reliability") or {}).get("provider_retries", 2) == 0
    return provider_call(provider, prompt, streaming, bool(session) and session)


PROMPT_FILE = {}  # the file the prompt was read from: its path and mode
CONFIG = {}  # the config the agent run loaded
#: What nullclaw's MCP client hands a server of its environment (plus the entry's "env").
MCP_INHERITED = ("PATH", "HOME", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "USER", "SHELL", "TMPDIR")


def _rpc(proc, ident, method, params):
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method,
                                 "params": params}) + "\n")  # fmt: skip
    proc.stdin.flush()
    for line in proc.stdout:
        answer = json.loads(line)
        if answer.get("id") == ident:
            return answer
    raise RuntimeError(f"the MCP server closed its stdout before answering {method}")


def mcp_calls(config):
    """Call MCP tools as nullclaw's stdio MCP client does (FAKE_NULLCLAW_MCP_CALLS)."""
    calls = os.environ.get("FAKE_NULLCLAW_MCP_CALLS")
    if not calls:
        return
    servers = config.get("mcp_servers") or {}
    procs, answers = {}, []
    try:
        for ident, call in enumerate(json.loads(calls), start=10):
            entry = servers.get(call["server"])
            if entry is None:
                answers.append({"tool": call["tool"], "error": "no such server in the config"})
                continue
            proc = procs.get(call["server"])
            if proc is None:
                env = {k: os.environ[k] for k in MCP_INHERITED if k in os.environ}
                env.update(entry.get("env") or {})
                with open(os.environ["FAKE_NULLCLAW_MCP_RECORD"] + ".stderr", "a") as errlog:
                    proc = subprocess.Popen(
                        [entry["command"], *entry.get("args", [])], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=errlog, env=env, text=True,
                    )  # fmt: skip
                procs[call["server"]] = proc
                init = {"protocolVersion": "2024-11-05", "capabilities": {},
                        "clientInfo": {"name": "nullclaw", "version": VERSION}}  # fmt: skip
                _rpc(proc, 1, "initialize", init)
                proc.stdin.write(
                    json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
                )
                proc.stdin.flush()  # fmt: skip
                listed = _rpc(proc, 2, "tools/list", {})
                answers.append({"tools": [t["name"] for t in listed["result"]["tools"]]})
            params = {"name": call["tool"], "arguments": call.get("arguments") or {}}
            answers.append({"tool": call["tool"], **_rpc(proc, ident, "tools/call", params)})
    finally:
        for proc in procs.values():
            proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        with open(os.environ["FAKE_NULLCLAW_MCP_RECORD"], "w", encoding="utf-8") as fh:
            json.dump(answers, fh)


def read_pointed_file(message):
    """What the "model" works on: the file a message points at (as an agent would read it with
    its file tool: "... is in the file X in your workspace (absolute path: /abs/X) ..."), else
    the message itself."""
    found = message and re.search(r"\(absolute path: (/[^)]*)\)\. Read that whole file", message)
    if not found:
        return message
    try:
        with open(found.group(1), encoding="utf-8") as fh:
            PROMPT_FILE["mode"] = os.fstat(fh.fileno()).st_mode & 0o777
            PROMPT_FILE["path"] = found.group(1)
            return fh.read()
    except OSError as exc:
        err(f"info(agent): file_read failed: {exc}")
        return message


def fail(name, rc=1, note="error(provider): request failed"):
    err(note)
    err(f"error: {name}")
    return rc


def spawn_children(pidfile):
    env = dict(os.environ)
    # the "curl" child talks to nullclaw through its own pipes; the shell-tool child inherits
    # nullclaw's stdout/stderr, so it also holds the worker's pipes open
    curl = subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, stdout=subprocess.DEVNULL, stdin=subprocess.PIPE
    )
    shell = subprocess.Popen(["/bin/sh", "-c", f'exec {sys.executable} -c "$1"', "sh", CHILD])
    with open(pidfile + ".tmp", "w") as fh:
        fh.write(f"nullclaw {os.getpid()}\ncurl {curl.pid}\nshell {shell.pid}\n")
    os.replace(pidfile + ".tmp", pidfile)
    return curl


def provider_call(provider, message, streaming, session):
    mode = os.environ.get("FAKE_NULLCLAW_MODE", "ok")
    if os.environ.get("FAKE_NULLCLAW_LEAK_KEY") == "1":  # a verbose diagnostic line
        err(f"info(agent): using key {os.environ.get('NULLCLAW_API_KEY')}")
    leaked = [n for n in os.environ.get("FAKE_NULLCLAW_LEAK_ENV", "").split(",") if n]
    for name in leaked:  # a shell tool that ran env, echoed in the diagnostics
        err(f"info(tool): shell: {name}={os.environ.get(name)}")
    out(f"Sending to {provider}...\n")
    if session:
        out(f"Session: {session}\n")
    if mode in ("http500", "http400", "nonjson", "down", "no_curl"):
        return fail("AllProvidersFailed")
    if mode == "http429":
        return fail("RateLimited", note="warn(provider): 429 Too Many Requests")
    if mode == "timeout":
        return fail("CurlFailed" if streaming else "AllProvidersFailed")
    if mode == "panic":
        err("panic: index out of bounds: index 3, len 2")
        return 1
    if mode == "selfkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "empty_answer":
        return 0
    if mode == "hang":
        out("thinking")
        curl = spawn_children(os.environ["FAKE_NULLCLAW_PIDFILE"])
        curl.wait()
        return 0
    if mode == "huge":
        size = int(os.environ.get("FAKE_NULLCLAW_SIZE", "3000000"))
        block = b"0123456789abcdef" * 4096
        sent = 0
        while sent < size:
            piece = block[: size - sent]
            sys.stdout.buffer.write(piece)
            sent += len(piece)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
        return 0
    if mode == "binary":
        sys.stdout.buffer.write(b"caf\xc3\xa9 \xff\xfe bad \xe2\x82 end\n")
        sys.stdout.flush()
        sys.stderr.buffer.write(b"info(agent): \xff\xfe\n")
        return 0
    answer = os.environ.get("FAKE_NULLCLAW_ANSWER") or f"Answer: {message[:60]}"
    answer += "".join(f" {name}={os.environ.get(name)}" for name in leaked)
    usage = os.environ.get("FAKE_NULLCLAW_USAGE")
    if usage:
        prompt_tokens, completion_tokens = (int(n) for n in usage.split(","))
        total = prompt_tokens + completion_tokens
        if (CONFIG.get("diagnostics") or {}).get("log_llm_io"):
            for step in (1, 2):  # a tool call, then the answer: two model calls
                err(
                    f"info(agent): llm response session=0x0 iter={step} attempt=1 model=fake "
                    f"bytes={len(answer)} tool_calls={2 - step} usage="
                    + json.dumps({"prompt_tokens": prompt_tokens,
                                  "completion_tokens": completion_tokens, "total_tokens": total},
                                 separators=(",", ":"))
                    + ' content="{not json} usage={}"'
                )  # fmt: skip
        if os.environ.get("FAKE_NULLCLAW_USAGE_FOOTER") == "1":
            answer += (
                f"\n\n[usage] prompt={prompt_tokens} completion={completion_tokens} "
                f"total={total} session_total={total}"
            )
    if mode == "slow":
        time.sleep(float(os.environ.get("FAKE_NULLCLAW_DELAY", "1")))
    if streaming:
        delay = float(os.environ.get("FAKE_NULLCLAW_DELAY", "0.05"))
        for start in range(0, len(answer), 8):
            out(answer[start : start + 8])
            time.sleep(delay)
        out("\n")
    else:
        out(answer + "\n")
    return 0


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("help", "--help", "-h"):
        sys.stderr.write(USAGE)
        return 0 if args else 1
    cmd = args[0]
    if cmd in ("version", "--version", "-V"):
        how = os.environ.get("FAKE_NULLCLAW_VERSION", "ok")
        if how == "fail":
            err("panic: reached unreachable code")
            return 1
        if how == "hang":
            time.sleep(3600)
        out(VERSION + "\n")
        return 0
    if cmd == "agent":
        return agent(args[1:])
    if cmd in KNOWN:
        return 0
    sys.stderr.write(f"Unknown command: {cmd}\n" + USAGE)
    return 1


if __name__ == "__main__":
    sys.exit(main())
