

def test_the_proxy_takes_new_parameters_for_every_switch(tmp_path):
    from emulator.dataplane.ovs import agent_proxy as ap
    proxy = ap.Proxy(P, ("127.0.0.1", 1), str(tmp_path / "agent.jsonl"))

    class FakeRelay:
        def __init__(self):
            import threading
            self.lock, self.agent, self.ended = threading.Lock(), Agent(P), threading.Event()
    relay = FakeRelay()
    proxy.relays = [relay]
    (tmp_path / "agent.jsonl.params").write_text('{"event_ms": 2500, "table_rate": 0.8}')
    proxy.reload()
    assert proxy.params.event_ms == 2500 and relay.agent.p.table_rate == 0.8
    assert '"d": "params"' in (tmp_path / "agent.jsonl").read_text()
