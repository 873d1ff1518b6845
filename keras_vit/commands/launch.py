"""Run a training command as several processes on this machine, training together (JAX).

    keras-vit launch --num-processes 2 pretrain --strategy data_parallel --batch-size 64
    keras-vit launch --num-processes 2 train.py --my_flag 1      # a script of your own

Starts the processes with Keras' KERAS_DISTRIBUTION_* variables set (the coordinator, the
count, each process's id; KERAS_BACKEND=jax unless set), which keras.distribution.initialize
reads. A keras-vit command runs as ``keras-vit COMMAND``, a ``.py`` file with this Python.
A keras-vit command's output is process 0's (each prints the same), a script's is every
process's; each process's errors are shown. If one process fails, the others are stopped
and its exit status is this command's. On several hosts, start each host's process
yourself with --coordinator-address, --num-processes and --process-id (or the variables);
on a TPU VM pod slice, --coordinator-address auto (docs/guide/recipes.md, "More than one
machine").
"""

import os
import signal
import socket
import subprocess
import sys
import time

from keras_vit import commands, quiet

STOP_GRACE_SECONDS = 10  # a stopped process's time to exit before it is killed


def build_parser():
    parser = commands.parser("launch", __doc__)
    parser.add_argument("--num-processes", type=int, default=2, help="processes to start")
    parser.add_argument("--port", type=int, default=0, help="the coordinator's port on 127.0.0.1 (0: a free one)")
    parser.add_argument("command", help="a keras-vit command (pretrain, finetune) or a .py script")
    parser.add_argument("arguments", nargs="...", help="that command's or script's own flags, passed on as given")
    return parser


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _program(command, arguments):
    if command.endswith(".py"):
        if not os.path.isfile(command):
            raise ValueError(f"no script {command!r}: expected a .py file or a keras-vit command.")
        return [sys.executable, command, *arguments]
    commands.known(command)  # an unknown command is an error here, not in every process
    return [sys.executable, "-m", "keras_vit", command, *arguments]


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.num_processes < 1:
            raise ValueError(f"--num-processes must be at least 1; got {args.num_processes}.")
        if not 0 <= args.port < 65536:
            raise ValueError(f"--port must be from 0 to 65535; got {args.port}.")
        program = _program(args.command, args.arguments)
    except ValueError as error:
        commands.bad_input(error)
    from keras_vit.training.processes import ENVIRONMENT  # here, not above: launch --help imports no backend

    address = f"127.0.0.1:{args.port or _free_port()}"
    environment = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")}
    environment.update(
        {ENVIRONMENT["coordinator_address"]: address, ENVIRONMENT["num_processes"]: str(args.num_processes)}
    )
    children = [
        subprocess.Popen(
            program,
            env={**environment, ENVIRONMENT["process_id"]: str(index)},
            stdout=_stdout(args.command, index),
            stderr=quiet.terminal(2),  # this terminal's: each child holds its backends' lines itself
        )
        for index in range(args.num_processes)
    ]
    try:
        return _wait(children)
    except KeyboardInterrupt:
        _stop(children)
        return 130


def _stdout(command, index):
    """A child's standard output: a keras-vit command's from process 0 alone (every process
    prints the same summary), a script's from each."""
    return subprocess.DEVNULL if index > 0 and not command.endswith(".py") else quiet.terminal(1)


def _wait(children):
    """The first failing child's exit status (the others stopped), else 0."""
    while True:
        statuses = [child.poll() for child in children]
        failed = [status for status in statuses if status not in (None, 0)]
        if failed:
            _stop(children)
            return failed[0] if failed[0] > 0 else 128 - failed[0]
        if all(status == 0 for status in statuses):
            return 0
        time.sleep(0.2)


def _stop(children):
    running = [child for child in children if child.poll() is None]
    for child in running:
        child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in running:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
