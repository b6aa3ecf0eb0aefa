"""App config for ``pipeline``: installs the memories hooks and, in server processes, lets
the first chat socket or server-side turn warm the pre-processing models
(:mod:`pipeline.warm_up`)."""

from __future__ import annotations

from django.apps import AppConfig


class PipelineConfig(AppConfig):
    """The ``pipeline`` app (see docs/architecture.md §2 for what it owns)."""

    name = "pipeline"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Install the memories app's retriever for main processing, its extraction
        hook for post-processing, the delete of a chat's memory-consent answers with
        the chat and the check of a user-written memory's source chat (docs/architecture.md
        §12); in a server process, enable
        the models' warm-up that the first chat socket or server-side turn starts
        (:mod:`pipeline.warm_up`; commands and tests load them when they use them)."""
        from chats.selectors import chat_owned_in_instance
        from chats.services import chat_delete_hook_register
        from memories.extractor import amemories_extract
        from memories.search import amemories_for_prompt
        from memories.services import memory_consent_forget, source_chat_check_set
        from openmates.apps import serving
        from pipeline import postprocess, prompts, warm_up

        prompts.memory_retriever_set(amemories_for_prompt)
        postprocess.memory_extractor_set(amemories_extract)
        chat_delete_hook_register(memory_consent_forget)
        source_chat_check_set(chat_owned_in_instance)

        if serving():
            warm_up.enable()
