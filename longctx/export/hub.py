"""Push an exported folder to the Hugging Face Hub, the token read from the environment and never shown.

The token is `HF_TOKEN` (where the command line puts a `--hub_token` override, longctx/config/credentials.py)
or huggingface_hub's own login; it is handed to the client and appears in no line this prints, and a failure's
message is printed with every secret masked. `api` is injectable so the push path is tested without a network.
"""

import os

from longctx.config.credentials import redact_text


def push(folder, repo_id: str, private: bool = False, api=None) -> str:
    """Create `repo_id` if needed and upload `folder` as one commit; returns the repository's URL."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="longctx export")
    except (OSError, ValueError, RuntimeError) as exc:  # HTTP (an OSError), auth, network: one line, masked
        raise RuntimeError(redact_text(f"push to {repo_id} failed: {type(exc).__name__}: {exc}")) from None
    return str(getattr(url, "url", url) or f"https://huggingface.co/{repo_id}")
