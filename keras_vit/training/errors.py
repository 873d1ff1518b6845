"""The recipes' input errors: raised by the fit driver (``run``), answered by the command
lines (``keras_vit.commands.recipe_flags.run_command_line``) with one line and exit status 2."""


class RecipeInputError(ValueError):
    """Bad input to a recipe (config, dataset, files, devices), found before its first
    training step; the command lines answer it with one line and exit status 2."""


class MissingInputFileError(RecipeInputError, FileNotFoundError):
    """A file the recipe needs (``--init-from``) is not there."""
