"""Images of a ``/v1`` request's last user message, read for its turn (docs/api.md §3).

They go into the turn as a browser's attached images do (``pipeline.files``): the model
gets each as an ``image_url`` part with a ``data:`` URL, the conversation keeps
``[image: name]``, no image bytes are stored. Limits are the browser's
(``pipeline.protocol.max_files`` / ``max_file_bytes`` / ``max_files_bytes``).

The turn's tier must see images (``openmates.llm.supports_vision`` of its first entry):
of the tiers the caller's role may be answered on, when every one sees images
pre-processing chooses as usual; when only some do, the turn is answered on one of those
(``standard`` if it is one); when none does, the request is 400 ``image_not_supported``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from instances.models import Instance, InstanceMember
from openai_api.wire import ImagePart, WireError
from openmates import llm
from pipeline import files as turn_files
from pipeline import protocol
from pipeline.file_types import IMAGE_TYPES
from pipeline.ids import new_id

PREFERRED_TIER = "standard"


def _extension(mime: str) -> str:
    return mime.split("/", 1)[1].replace("jpeg", "jpg")


def images_read(images: Sequence[ImagePart], *, param: str) -> tuple[turn_files.TurnFile, ...]:
    """``images`` as the turn's files, named ``image-1.png`` … in their order.

    Raises:
        WireError: more images than ``max_files()``, one over ``max_file_bytes()`` or all
            over ``max_files_bytes()`` (``image_too_large``), a type not PNG, JPEG,
            WebP or GIF, base64 that does not decode, or bytes that are not an image of
            the stated type (``invalid_image``; all 400).
    """
    if len(images) > protocol.max_files():
        raise WireError(
            400,
            f"A message may carry at most {protocol.max_files()} images.",
            code="too_many_images",
            param=param,
        )
    files, total = [], 0
    for number, image in enumerate(images, start=1):
        if image.mime not in IMAGE_TYPES:
            types = ", ".join(sorted(IMAGE_TYPES))
            raise _invalid(f"Image {number} is {image.mime}; images are one of {types}.", image)
        try:
            data = base64.b64decode(image.data_b64, validate=True)
        except (binascii.Error, ValueError):
            raise _invalid(f"Image {number}'s base64 does not decode.", image) from None
        total += len(data)
        if len(data) > protocol.max_file_bytes() or total > protocol.max_files_bytes():
            raise WireError(
                400,
                f"Images are at most {protocol.max_file_bytes()} bytes each and "
                f"{protocol.max_files_bytes()} bytes together.",
                code="image_too_large",
                param=image.param,
            )
        try:
            files.append(
                turn_files.turn_file(
                    embed_id=new_id(),
                    name=f"image-{number}.{_extension(image.mime)}",
                    mime=image.mime,
                    data_b64=image.data_b64,
                )
            )
        except turn_files.UnsupportedFile:
            raise _invalid(f"Image {number} is not a valid {image.mime} image.", image) from None
    return tuple(files)


def _invalid(message: str, image: ImagePart) -> WireError:
    return WireError(400, message, code="invalid_image", param=image.param)


async def vision_tier(*, instance: Instance, role: str, param: str) -> str | None:
    """The tier a turn with images is answered on: None when every tier ``role`` may use
    sees images (pre-processing chooses), else one that does.

    Raises:
        WireError: no such tier sees images (400 ``image_not_supported``).
    """
    allowed = InstanceMember.TIERS_BY_ROLE.get(role, InstanceMember.TIERS_BY_ROLE["member"])
    seeing = [t for t in allowed if await llm.supports_vision(tier=t, instance=instance)]
    if not seeing:
        raise WireError(
            400,
            f"The model {instance.slug!r} cannot see images: none of its tiers you may use "
            "runs a vision model. Send text only, or ask its owner for a vision model.",
            code="image_not_supported",
            param=param,
        )
    if len(seeing) == len(allowed):
        return None
    return PREFERRED_TIER if PREFERRED_TIER in seeing else seeing[0]
