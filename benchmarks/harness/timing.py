"""Wall times of steps: one step alone, or several taking turns in rounds."""

import statistics
import time


def timings(step, warmup, min_steps, min_seconds):
    """Wall times of ``step()`` (which must block until its result exists), after warm-up."""
    for _ in range(warmup):
        step()
    times, start = [], time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < min_seconds:
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return times


def best_seconds(step, warmup, min_steps, min_seconds):
    return min(timings(step, warmup, min_steps, min_seconds))


def interleaved_timings(steps, repeats, min_steps, min_seconds):
    """``{name: [median seconds of each round]}`` for ``steps`` (``{name: step}``), taking turns.

    In each of ``repeats`` rounds every step runs once per turn, in an order that rotates
    from round to round, until each has run ``min_steps`` times and the round has lasted
    ``min_seconds`` per step function (split evenly over the rounds). A step that raises is
    dropped from the rounds after; its error is in ``{name: error}``, the second value.
    """
    names = list(steps)
    medians, errors = {name: [] for name in names}, {}
    for r in range(repeats):
        order = [n for n in names[r % len(names) :] + names[: r % len(names)] if n not in errors]
        times = {name: [] for name in order}
        start = time.perf_counter()
        while order and (
            min(len(times[n]) for n in order) < min_steps
            or time.perf_counter() - start < min_seconds * len(order) / repeats
        ):
            for name in list(order):
                try:
                    begin = time.perf_counter()
                    steps[name]()
                    times[name].append(time.perf_counter() - begin)
                except Exception as error:  # noqa: BLE001  (reported in the engine's row)
                    errors[name] = error
                    order.remove(name)
        for name in order:
            medians[name].append(statistics.median(times[name]))
    return medians, errors
