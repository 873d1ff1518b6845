"""The parser every keras-vit command uses: argparse's, with the command line's own rules.

Bad input is one line on stderr and exit status 2 (argparse's own prints the whole usage
first); the flags are spelt with hyphens (``--batch-size``), as argparse and timm spell
them, and the underscore form of a flag (``--batch_size``) is the same flag; ``--help``
shows each flag's default as it would be typed (none for a required flag, an unset one or
an off-switch); ``add_switch`` makes a true/false option's ``--name`` / ``--no-name``. A
flag is taken as spelt: no abbreviation (``--epoch`` is not ``--epochs``).
"""

import argparse
import sys


def shown(value):
    """A default as a user would type it: ``1,5,10`` for a list; ``true``, ``false``, ``none``;
    ``""`` for the empty text.

    >>> shown([1, 5, 10]), shown(None), shown("")
    ('1,5,10', 'none', '""')
    """
    if isinstance(value, (list, tuple)):
        return ",".join(map(shown, value))
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    return str(value) if value != "" else '""'


def with_default(text, default):
    """A flag's help with its default as it would be typed, where there is one to show."""
    if default is None or default is argparse.SUPPRESS or default is False:
        return text
    return f"{text} (default: {shown(default).replace('%', '%%')})"  # argparse formats help with %


class CommandLineParser(argparse.ArgumentParser):
    """argparse's parser with the rules of the module's docstring.

    >>> parser = CommandLineParser(prog="keras-vit demo")
    >>> _ = parser.add_argument("--batch-size", type=int, default=32, help="images per step")
    >>> parser.parse_args(["--batch_size", "8"]).batch_size
    8
    >>> "images per step (default: 32)" in " ".join(parser.format_help().split())
    True
    """

    def __init__(self, *args, **kwargs):
        self.takes_value = {}  # every flag of this parser: whether a value follows it
        self.passes_on = False  # whether the rest of the line is another program's
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # --epoch is not --epochs: a typo is an error
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **options):
        return self._added(super().add_argument, names, options)

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument
        group.add_argument = lambda *names, **options: self._added(add, names, options)
        return group

    def _added(self, add, names, options):
        if "help" in options and options["help"] is not argparse.SUPPRESS and not options.get("required"):
            options["help"] = with_default(options["help"], options.get("default"))
        action = add(*names, **options)
        for name in action.option_strings:
            self.takes_value[name] = action.nargs is None
        self.passes_on = self.passes_on or action.nargs == argparse.REMAINDER
        return action

    def add_switch(self, group, flag, dest, help, optional=False):
        """``flag`` (``--resume``, or ``--resume true|false``, ``|none`` where ``optional``)
        and ``--no-...`` (false) for ``dest``; the value reaches the namespace as text
        (``"true"`` / ``"false"``), for the caller's own parsing. Only ``flag`` is listed in
        ``--help``: say the other in ``help``."""
        negative = f"--no-{flag[2:]}"
        metavar = "true|false|none" if optional else "true|false"
        group.add_argument(flag, dest=dest, nargs="?", const="true", metavar=metavar, default=argparse.SUPPRESS,
                           help=help)  # fmt: skip
        group.add_argument(negative, dest=dest, action="store_const", const="false", default=argparse.SUPPRESS,
                           help=argparse.SUPPRESS)  # fmt: skip

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._hyphenated_all(args), namespace)

    def _hyphenated_all(self, args):
        # A parser that passes the rest of the line on (keras-vit launch COMMAND ...) leaves
        # everything from that command on as given: it is another program's line.
        out, expects_value = [], False
        for index, token in enumerate(args):
            if self.passes_on and not expects_value and not token.startswith("-"):
                return out + args[index:]
            token = self._hyphenated(token)
            expects_value = self.takes_value.get(token, False)
            out.append(token)
        return out

    def _hyphenated(self, token):
        # Only a token that then names one of this parser's flags: the rest (values, a
        # launched script's own flags) is passed on as given.
        if not token.startswith("--") or "_" not in token.partition("=")[0]:
            return token
        name, sep, value = token.partition("=")
        name = "--" + name[2:].replace("_", "-")
        return name + sep + value if name in self.takes_value else token

    def print_help(self, file=None):
        # argparse's own ignores a failed write: a closed output must reach the command's caller.
        (file or sys.stdout).write(self.format_help())

    def error(self, message):
        self.exit(2, f"error: {message}; {self.prog} --help lists the flags\n")
