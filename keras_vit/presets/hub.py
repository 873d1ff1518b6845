"""Hugging Face hub repositories: ``hf-hub:<org>/<name>[@<revision>]`` -> local files.

Files are fetched by ``huggingface_hub``, the library timm and transformers download with,
so its cache is shared with them: a checkpoint timm or transformers already fetched is not
fetched again. Its settings work as they do for timm, read at each call: ``HF_ENDPOINT``
(another hub, e.g. a company's mirror of it), ``HF_HOME`` / ``HF_HUB_CACHE`` (where the
cache is), ``HF_HUB_OFFLINE`` (no network: the cache only; ``KERAS_VIT_OFFLINE`` too) and
``HF_TOKEN`` (gated and private repositories). A revision (a branch, tag or commit) pins
what is fetched: ``hf-hub:timm/vit_small_patch16_224.augreg_in21k@<commit>``.
"""

import os
import re

from keras_vit.presets import download

PREFIX = "hf-hub:"
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_REVISION = re.compile(r"[\w.\-/]+")


class HubError(download.DownloadError):
    """A hub file that could not be had: no such repository, revision or file, a gated
    repository without a token, or the network forbidden and the file not in the cache."""


def is_hub_name(name):
    return isinstance(name, str) and name.startswith(PREFIX)


def parse(name):
    """``(repository, revision or None)`` of a hub name, checked.

    >>> parse("hf-hub:timm/vit_small_patch16_224.augreg_in21k")
    ('timm/vit_small_patch16_224.augreg_in21k', None)
    >>> parse("hf-hub:facebook/dinov2-small@refs/pr/1")
    ('facebook/dinov2-small', 'refs/pr/1')
    """
    rest = name[len(PREFIX) :] if is_hub_name(name) else name
    repo, at, revision = (rest or "").partition("@")
    if not _REPO.fullmatch(repo) or (at and not _REVISION.fullmatch(revision)):
        raise ValueError(f"Expected a hub name 'hf-hub:<organisation>/<repository>[@<revision>]'; got {name!r}.")
    return repo, revision or None


def repo_id(name):
    """``"timm/<name>"`` from ``"hf-hub:timm/<name>"``, checked.

    >>> repo_id("hf-hub:timm/vit_small_patch16_224.augreg_in21k")
    'timm/vit_small_patch16_224.augreg_in21k'
    """
    return parse(name)[0]


def endpoint():
    """The hub asked (``HF_ENDPOINT``, default huggingface.co), as the variable says now."""
    return (os.environ.get("HF_ENDPOINT", "").strip() or "https://huggingface.co").rstrip("/")


def is_offline():
    return download.is_offline("HF_HUB_OFFLINE") or download.is_offline()


def fetch(name, filename, missing_ok=False):
    """The local path of ``filename`` in the hub repository ``name``, from the shared cache
    (downloaded into it first if need be); None if the repository has no such file and
    ``missing_ok``."""
    # Imported here: its HTTP stack is needed only once a hub file is asked for.
    import huggingface_hub
    from huggingface_hub import errors

    repo, revision = parse(name)
    asked = f"{filename} of {PREFIX}{repo}" + (f"@{revision}" if revision else "")
    cache = os.environ.get("HF_HUB_CACHE") or (
        os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None
    )
    try:
        return huggingface_hub.hf_hub_download(
            repo,
            filename,
            revision=revision,
            endpoint=endpoint(),
            cache_dir=cache,
            local_files_only=is_offline(),
            library_name="keras-vit",
        )
    except errors.GatedRepoError:
        raise HubError(
            f"{asked}: the repository is gated. Accept its terms on the hub with your account, then set "
            "HF_TOKEN to a token of that account (or log in with `hf auth login`)."
        ) from None
    except errors.RepositoryNotFoundError:
        raise HubError(
            f"{asked}: no such repository on {endpoint()} (a private one needs HF_TOKEN set to a token "
            "that can read it). Check the name: 'hf-hub:<organisation>/<repository>'."
        ) from None
    except errors.RevisionNotFoundError:
        raise HubError(f"{asked}: the repository has no revision {revision!r} (a branch, tag or commit).") from None
    except errors.LocalEntryNotFoundError as error:
        where = f"the Hugging Face cache{f' ({cache})' if cache else ''}"
        if is_offline():
            raise HubError(
                f"{asked} is not in {where}, and HF_HUB_OFFLINE or KERAS_VIT_OFFLINE forbids the network. Fetch it "
                "once with the network (keras-vit, timm and transformers share the cache), or unset the variable."
            ) from None
        raise HubError(f"{asked} is not in {where}, and {endpoint()} could not be reached: {error}") from None
    except errors.RemoteEntryNotFoundError:
        if missing_ok:
            return None
        raise HubError(f"{asked}: the repository has no such file.") from None
