"""The zygote's program (see ``zygote``): ``python _zygote_main.py MODULE...`` imports the modules,
then forks one child per request line on stdin. Run by path and importing nothing of fx2nnef."""

import json
import os
import runpy
import select
import signal
import sys
import traceback

del sys.path[0]  # this file's folder: its tract.py would shadow the tract package
for _name in sys.argv[1:]:
    try:
        __import__(_name)
    except Exception:
        pass  # the child imports it again and reports the failure in its own words
_requests = os.fdopen(os.dup(0), "rb")
_reply = os.fdopen(os.dup(1), "w")
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)


def _die_with_zygote():
    """The child is killed when the zygote ends, however it ends (Linux's parent-death signal)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere the child outlives a killed zygote, as before
        pass


def _wait(pid):
    """The child's wait status. When the caller's end of the requests closes meanwhile (the calling
    process is gone: killed, or a notebook kernel restarted), the child is killed and the zygote
    leaves: a tract run that never ends does not go on alone."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3, other systems): wait for the child
        return os.waitpid(pid, 0)[1]
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(_requests.fileno(), select.POLLHUP)
    try:
        while True:
            for fd, events in poller.poll():
                if fd == pidfd:
                    return os.waitpid(pid, 0)[1]
                if events & (select.POLLHUP | select.POLLERR):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    raise SystemExit(0)
                poller.unregister(fd)  # a request before the reply (none is sent): left for later
    finally:
        os.close(pidfd)


def _child(request):
    _die_with_zygote()
    os.chdir(request["workdir"])
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    os.dup2(os.open(request["stdout"], flags, 0o644), 1)
    os.dup2(os.open(request["stderr"], flags, 0o644), 2)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["script"], request["workdir"]]
    code = 0
    try:
        runpy.run_path(request["script"], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


try:
    for _line in _requests:
        _request = json.loads(_line)
        _pid = os.fork()
        if _pid == 0:
            _requests.close()
            _reply.close()
            _child(_request)
        _reply.write(json.dumps({"pid": _pid}) + "\n")
        _reply.flush()
        _status = _wait(_pid)
        _reply.write(json.dumps({"status": os.waitstatus_to_exitcode(_status)}) + "\n")
        _reply.flush()
except (KeyboardInterrupt, BrokenPipeError):
    pass
