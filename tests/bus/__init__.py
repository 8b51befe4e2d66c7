"""Tests against real servers on 127.0.0.1 (a nats-server or a three-node cluster, an
SMTP or HTTP endpoint): the stores, the gate, the desks, the model gateway."""
