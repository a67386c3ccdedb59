"""A Flower Grid that calls each node's ClientApp in this thread (no Ray, no SuperLink): the
ServerApp's protocol driven in a second, for tests of what it does and refuses. A node can be
taken offline from a given phase on (its messages then get no reply)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from noisyanchor.participant.flower_client import CONFIG_KEY


class LoopbackGrid(Grid):
    """Nodes ``1..n``, node ``i`` running ``app`` with the kit ``kits[i - 1]``."""

    def __init__(self, kits: list[Path], app: ClientApp) -> None:
        self.app = app
        # Messages take their run and sender from the task's identity (a SuperLink sets it).
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
        self.contexts = {i + 1: Context(run_id=1, node_id=i + 1,
                                        node_config={CONFIG_KEY: str(kit)}, state=RecordDict(),
                                        run_config={})
                         for i, kit in enumerate(kits)}
        self.offline_from: dict[int, str] = {}  # node -> message type from which it is gone
        self.gone: set[int] = set()
        self._run = None

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise NotImplementedError("send_and_receive only")

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise NotImplementedError("send_and_receive only")

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        replies = []
        for message in messages:
            node, kind = message.metadata.dst_node_id, message.metadata.message_type
            if self.offline_from.get(node) == kind:
                self.gone.add(node)
            if node not in self.gone:
                replies.append(self.app(message, self.contexts[node]))
        return replies
