"""Hugging Face hub repositories: ``hf-hub:<org>/<name>[@<revision>]`` -> local files.

Files are fetched by ``huggingface_hub``, the library timm and transformers download with,
so its cache is shared with them: a checkpoint timm or transformers already fetched is not
fetched again. Its settings work as they do for timm, read at each call: ``HF_ENDPOINT``
(another hub, e.g. a company's mirror of it), ``HF_HOME`` / ``HF_HUB_CACHE`` (where the
cache is), ``HF_HUB_OFFLINE`` (no network: the cache only; ``KERAS_VIT_OFFLINE`` too) and
``HF_TOKEN`` (gated and private repositories). A revision (a branch, tag or commit) pins
what is fetched: ``hf-hub:timm/vit_small_patch16_224.augreg_in21k@<commit>``.

A preset's file on the hub (``https://huggingface.co/<org>/<name>/resolve/<revision>/<file>``)
comes the same way (``fetch_url``, which sends every other URL to keras-vit's own cache,
``download``). A file not yet cached is first asked about once (a ``HEAD``), retried as
keras-vit's downloads are (``fetch.retrying``): a host name that does not resolve fails at
once, rather than after ``huggingface_hub``'s own retries.
"""

import os
import re
import urllib.parse

from keras_vit.presets import download, integrity
from keras_vit.presets.fetch import RETRY_STATUSES, FetchError, Retryable, retrying, unresolved

PREFIX = "hf-hub:"
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_REVISION = re.compile(r"[\w.\-/]+")
# A file on the hub, as the catalog and timm name it: <org>/<name>/resolve/<revision>/<file>.
_HUB_FILE = re.compile(r"https://huggingface\.co/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>[^/].*)")


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


def fetch(name, filename, missing_ok=False, *, hint=""):
    """The local path of ``filename`` in the hub repository ``name``, from the shared cache
    (downloaded into it first if need be); None if the repository has no such file and
    ``missing_ok``. ``hint``: another way to get the file, said when it cannot be had."""
    # Imported here: its HTTP stack is needed only once a hub file is asked for.
    import huggingface_hub
    from huggingface_hub import errors

    repo, revision = parse(name)
    asked = f"{filename} of {PREFIX}{repo}" + (f"@{revision}" if revision else "")
    cache = _cache()
    where = f"the Hugging Face cache{f' ({cache})' if cache else ''}"
    offline = is_offline()
    try:
        if not offline and cached(name, filename) is None:  # else huggingface_hub falls back on the cache at once
            _ask(repo, filename, revision)
        return huggingface_hub.hf_hub_download(
            repo,
            filename,
            revision=revision,
            endpoint=endpoint(),
            cache_dir=cache,
            local_files_only=offline,
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
    except errors.RemoteEntryNotFoundError:
        if missing_ok:
            return None
        raise HubError(f"{asked}: the repository has no such file.") from None
    except (errors.LocalEntryNotFoundError, FetchError) as error:
        if offline:
            raise HubError(
                f"{asked} is not in {where}, and HF_HUB_OFFLINE or KERAS_VIT_OFFLINE forbids the network. Fetch it "
                f"once with the network from the hub HF_ENDPOINT names ({endpoint()}; keras-vit, timm and "
                f"transformers share the cache), or unset the variable."
            ) from None
        raise HubError(
            f"{asked} is not in {where}, and {endpoint()} could not be reached: {error}. Check the network, or set "
            f"HF_ENDPOINT to a hub (or a mirror of it) that can be reached{hint}; with the file in the cache, "
            "HF_HUB_OFFLINE=1 or KERAS_VIT_OFFLINE=1 skips the network."
        ) from None


def cached(name, filename):
    """The path of ``filename`` of ``name`` in the Hugging Face cache, None if it is not
    there; asks nothing of the network."""
    import huggingface_hub

    repo, revision = parse(name)
    path = huggingface_hub.try_to_load_from_cache(repo, filename, cache_dir=_cache(), revision=revision)
    return path if isinstance(path, str) else None  # else None or "known to be missing"


def _cache():
    """The cache the variables name now (``huggingface_hub`` reads them once, at its import)."""
    return os.environ.get("HF_HUB_CACHE") or (
        os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None
    )


def _ask(repo, filename, revision):
    """Asks the hub about a file once (a ``HEAD``), again after a failure that may pass (as
    ``fetch.retrying`` does for every download), so that an unreachable hub is a
    ``FetchError`` now rather than after ``huggingface_hub``'s own retries; the hub's
    answers (no such repository, gated, ...) raise as ``hf_hub_download`` raises them."""
    import huggingface_hub
    from huggingface_hub import errors

    url = huggingface_hub.hf_hub_url(repo, filename, revision=revision, endpoint=endpoint())

    def attempt():
        try:
            huggingface_hub.get_hf_file_metadata(url, endpoint=endpoint(), library_name="keras-vit")
        except errors.HfHubHTTPError as error:
            status = getattr(error.response, "status_code", None)
            if status in RETRY_STATUSES:
                raise Retryable(f"HTTP {status}") from None
            raise
        except Exception as error:  # the HTTP library's own classes (httpx's or requests'), an OSError within
            if (failure := unresolved(error)) is not None:
                raise failure from None
            if not _network_failure(error):
                raise
            raise Retryable(str(error) or type(error).__name__) from None

    retrying(attempt)


def _network_failure(error):
    """Whether an ``OSError`` (refused, reset, timed out) is at the root of ``error``."""
    while error is not None:
        if isinstance(error, OSError):
            return True
        error = error.__cause__ or error.__context__
    return False


def hub_file(url):
    """``(hub name, file)`` of a hub file's URL, None for any other URL.

    >>> hub_file("https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k/resolve/main/model.safetensors")
    ('hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k', 'model.safetensors')
    >>> hub_file("https://huggingface.co/org/name/resolve/refs%2Fpr%2F1/weights/model.safetensors?download=true")
    ('hf-hub:org/name@refs/pr/1', 'weights/model.safetensors')
    >>> hub_file("https://storage.googleapis.com/vit_models/augreg/x.npz") is None
    True
    """
    match = _HUB_FILE.fullmatch(url.split("?")[0].split("#")[0]) if isinstance(url, str) else None
    if match is None:
        return None
    revision = urllib.parse.unquote(match["revision"])
    name = f"{PREFIX}{match['repo']}" + ("" if revision == "main" else f"@{revision}")
    return name, urllib.parse.unquote(match["file"])


def fetch_url(url, *, sha256=None, size=None):
    """The local path of a weights file named by its URL: a hub file (``hub_file``) from the
    Hugging Face cache (found there without a request, else fetched by ``fetch``), checked
    against ``size`` and ``sha256`` where given; any other URL, and a hub file where
    ``KERAS_VIT_MIRROR`` is set and ``HF_ENDPOINT`` is not (a plain server or folder keeping
    the hub's paths, which ``huggingface_hub`` cannot read) or that such a mirror served
    before, through keras-vit's own cache (``download.download``)."""
    located = hub_file(url)
    if located is None:
        return download.download(url, sha256=sha256, size=size)
    name, filename = located
    path = cached(name, filename)
    # keras-vit's own cache holds what a plain mirror served: found there whatever the
    # variables say now (a file fetched through KERAS_VIT_MIRROR, read later offline).
    if path is None and (_plain_mirror() or os.path.exists(download.cache_path(url))):
        return download.download(url, sha256=sha256, size=size)
    if path is None:
        hint = (
            ", or set KERAS_VIT_MIRROR (with HF_ENDPOINT unset) to a server or folder holding it at "
            f"{urllib.parse.urlsplit(url).path.lstrip('/')}"
        )
        path = fetch(name, filename, hint=hint)
    return _checked(path, url, sha256, size)


def _plain_mirror():
    """Whether hub files come from ``KERAS_VIT_MIRROR``: it is set and ``HF_ENDPOINT`` (the
    hub's own way to name a mirror, which must answer as the hub does) is not."""
    return bool(os.environ.get("KERAS_VIT_MIRROR", "").strip() and not os.environ.get("HF_ENDPOINT", "").strip())


def _checked(path, url, sha256, size):
    """``path`` if it has ``size`` bytes and the SHA-256 ``sha256`` (where given), else an
    ``IntegrityError``. The file is left where it is: it belongs to a cache other libraries
    read too."""
    problem = None
    if size is not None and os.path.getsize(path) != size:
        problem = f"it has {os.path.getsize(path)} bytes, expected {size}"
    elif sha256 is not None:
        expected = integrity.check_sha256(sha256)
        # The cache names a large file's blob by the SHA-256 the hub gave: read it whole only if that differs.
        if os.path.basename(os.path.realpath(path)) != expected:
            actual = integrity.file_sha256(path)
            problem = None if actual == expected else f"its sha256 is {actual}, expected {expected}"
    if problem is None:
        return path
    raise download.IntegrityError(
        f"The Hugging Face cache's {path} is not the file of {url}: {problem}. Remove it (`hf cache delete`, or "
        "the file) to fetch it again; if the hub's file itself differs, load it by its hub name instead.",
        url=url,
        path=path,
    )
