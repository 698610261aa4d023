"""Small protobuf helpers shared by the request and response translators."""

from __future__ import annotations

from google.protobuf.message import Message


def set_message(field: Message, value: Message) -> None:
    """Copy `value` into the sub-message `field` and mark it present even when `value` is empty.

    Presence carries meaning here ("no change" vs "change to nothing"), and merging an empty
    message would leave the field absent.
    """
    field.SetInParent()
    field.MergeFrom(value)
