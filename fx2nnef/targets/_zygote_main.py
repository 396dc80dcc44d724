"""The zygote's program (see ``zygote``): ``python _zygote_main.py MODULE...`` imports the modules,
then forks one child per request line on stdin. Run by path and importing nothing of fx2nnef."""

import json
import os
import runpy
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


def _child(request):
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
        _, _status = os.waitpid(_pid, 0)
        _reply.write(json.dumps({"status": os.waitstatus_to_exitcode(_status)}) + "\n")
        _reply.flush()
except (KeyboardInterrupt, BrokenPipeError):
    pass
