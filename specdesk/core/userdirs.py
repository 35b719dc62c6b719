"""Where specdesk keeps its files: settings, session logs, measured memory peaks, converted models; where its
icons are.

``SPECDESK_CONFIG_DIR``, ``SPECDESK_DATA_DIR`` and ``SPECDESK_CACHE_DIR`` override the platform defaults
(tests use them).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


APP_ID = "org.specdesk.Specdesk"  # the desktop entry's and the icon's name, AppStream's id, Qt's desktopFileName


def icons_dir() -> Path:
    """The icons shipped with specdesk: a source checkout's resources/icons, or the installed package's."""
    from specdesk.core.loading import bundled_models_dir

    return bundled_models_dir().parent / "icons"


def config_dir() -> Path:
    env = os.environ.get("SPECDESK_CONFIG_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir("specdesk", appauthor=False))


def data_dir() -> Path:
    env = os.environ.get("SPECDESK_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("specdesk", appauthor=False))


def cache_dir() -> Path:
    """Files specdesk can rebuild (GGUF files converted to safetensors): safe to delete."""
    env = os.environ.get("SPECDESK_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("specdesk", appauthor=False))


def logs_dir() -> Path:
    return data_dir() / "sessions"


def settings_path() -> Path:
    return config_dir() / "settings.json"


def read_json_dict(path: Path) -> dict:
    """A JSON object file's contents; a missing, unreadable or other file counts as empty (rewritten on the next
    save)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_json(path: Path, obj) -> None:
    """Write atomically, so a crash never leaves half a file. Raises OSError if it cannot be written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def _umask() -> int:
    try:  # Linux says it without changing it (os.umask sets it to read it, which races other threads)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def usual_mode(path: Path) -> None:
    """Give a file written through a temporary file (safetensors does: mode 0600) the mode an ordinary new file gets
    (0666 less the umask), so a draft folder or table can be served or shared like the user's other files."""
    try:
        os.chmod(path, 0o666 & ~_umask())
    except OSError:  # a file system without modes: nothing to put right
        pass


def load_settings() -> dict:
    """The user's settings; an unreadable file counts as empty (it is rewritten on the next save)."""
    return read_json_dict(settings_path())


def save_settings(settings: dict) -> None:
    write_json(settings_path(), settings)


def update_settings(**changes) -> dict:
    s = load_settings()
    s.update(changes)
    save_settings(s)
    return s


def added_folders() -> list[str]:
    return [str(p) for p in load_settings().get("model_folders", []) if isinstance(p, str)]


def add_folder(path: str | os.PathLike) -> list[str]:
    folders = added_folders()
    p = str(Path(path).expanduser().resolve())
    if p not in folders:
        folders.append(p)
    update_settings(model_folders=folders)
    return folders


def remove_folder(path: str | os.PathLike) -> list[str]:
    p = str(Path(path).expanduser().resolve())
    folders = [f for f in added_folders() if f != p and f != str(path)]
    update_settings(model_folders=folders)
    return folders
