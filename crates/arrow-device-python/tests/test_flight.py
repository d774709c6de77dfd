"""`arrow_device.flight` against pyarrow's Flight, both ways, over every
golden Arrow IPC stream (Arrow C++ 21, every Arrow type):

* pyarrow's client reads our server, which serves the golden file, and a
  device stream on the emulated device;
* our `fetch` reads a pyarrow server, landing the batches on the CPU and on
  the emulated device;
* pyarrow's `do_put` uploads to our sink, which lands the batches on the
  CPU and on the emulated device;
* our `put` uploads a CPU stream and an emulated-device stream to a pyarrow
  server.

Each compares, at the end, what arrived with pyarrow's own read of the
golden file: schema with its metadata, and values. Every golden stream
round-trips whole (arrow-rs 60 and pyarrow 26 both carry list views,
run-end encoding, extension types and nested dictionaries over IPC), so
there is no list of exceptions.

The emulated device runs strict (its memory is PROT_NONE to the host) and
delayed (each copy lands late, poison until its event) for the whole
module, so a batch read before its `sync_event` fails the comparison.

Then the faults, from Python: tokens, unknown names, a source served once,
a sink and sources that raise, bad arguments, a server and its clients in
one process (the GIL released wherever a call waits). TLS round trips are
the Rust tests' (crates/arrow-device-flight/tests): they make their
certificates with rcgen, and this venv has no `cryptography` to make one;
here only TLS arguments that are refused before any connection are tested.
"""

import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.flight as pf
import pyarrow.ipc as ipc
import pytest

import arrow_device as ad
from arrow_device import flight
from arrow_device._arrow_device import _conformance_emulate
from checks import raises_cleanly, read_golden

#: The emulated device id of this module (others use 0 to 4).
EMULATED_ID = 5

#: Each copy onto or off the emulated device waits this long (µs): long
#: enough that a read that skips the sync_event finds poison, short enough
#: for 32 files × 8 round trips.
DELAY_US = 2000

DEVICES = ["cpu", "emulated"]


def device_of(name):
    return ad.cpu() if name == "cpu" else ad.emulated(EMULATED_ID)


def golden_name(path):
    return path.stem.removeprefix("generated_")


def assert_table_equal(got, expected):
    """Schema (its metadata included), row count and values."""
    assert got.schema.equals(expected.schema, check_metadata=True), (got.schema, expected.schema)
    assert got.num_rows == expected.num_rows
    assert got.equals(expected, check_metadata=True)


def to_host_table(stream, device):
    """Reads a DeviceStream whole: each batch checked to be on `device` and
    copied to the CPU (after its sync_event); the table has the stream's
    schema (a stream without batches still has one)."""
    schema = pa.schema(stream)
    batches = []
    for batch in stream:
        assert batch.device == device, (batch.device, device)
        batches.append(pa.record_batch(batch.to(ad.cpu())))
    return pa.Table.from_batches(batches, schema=schema)


@pytest.fixture(scope="module", autouse=True)
def strict_delayed_emulated_device():
    """The emulated devices strict and delayed for this module; the
    configuration before is put back after."""
    strict, delay_us = _conformance_emulate(True, 0, delay_us=DELAY_US)
    yield
    _conformance_emulate(strict, 0, delay_us=delay_us)


@pytest.fixture(scope="module")
def golden(golden_files):
    """name -> (path, table, batches), as pyarrow reads the file."""
    files = {}
    for path in golden_files:
        schema, batches = read_golden(path)
        files[golden_name(path)] = (path, pa.Table.from_batches(batches, schema=schema), batches)
    return files


class GoldenPeer(pf.FlightServerBase):
    """pyarrow's Flight server: serves each golden table under its name,
    and keeps each upload under its descriptor's path."""

    def __init__(self, tables):
        super().__init__("grpc://127.0.0.1:0")
        self.tables = tables
        self.stored = {}

    def do_get(self, context, ticket):
        return pf.RecordBatchStream(self.tables[ticket.ticket.decode()])

    def do_put(self, context, descriptor, reader, writer):
        self.stored[descriptor.path[0].decode()] = reader.read_all()


@pytest.fixture(scope="module")
def peer(golden):
    server = GoldenPeer({name: table for name, (_, table, _) in golden.items()})
    server.location = f"grpc://127.0.0.1:{server.port}"
    yield server
    server.shutdown()


class Received:
    """What a sink received: per upload name, its schema and its batches
    (copied to the CPU, each checked to be on the sink's device)."""

    def __init__(self, device):
        self.device = device
        self.tables = {}

    def __call__(self, descriptor, stream):
        self.tables[descriptor[0]] = to_host_table(stream, self.device)


@pytest.fixture(scope="module")
def ours(golden):
    """Our servers: "file/NAME" serves the golden file, "device/NAME" a
    device stream of its batches on the emulated device (made anew for
    each do_get). A file without batches gives no list of arrays to make a
    stream of, so its device stream is the file fetched onto the emulated
    device from this same server: a relay. One server per sink device."""
    emulated = device_of("emulated")
    servers = {}
    location = {}

    def device_stream(path, batches):
        if batches:
            return lambda: ad.stream([ad.array(b, device=emulated) for b in batches])
        return lambda: flight.fetch(location["cpu"], f"file/{golden_name(path)}", emulated)

    for device in DEVICES:
        sources = {}
        for name, (path, _, batches) in golden.items():
            sources[f"file/{name}"] = str(path)
            sources[f"device/{name}"] = device_stream(path, batches)
        received = Received(device_of(device))
        server = flight.serve(sources, sink=received, sink_device=device_of(device))
        servers[device] = SimpleNamespace(server=server, location=server.location, received=received)
        location[device] = server.location
    yield servers
    for ours in servers.values():
        ours.server.shutdown()


# --- the golden streams, each way ---------------------------------------------


def test_the_golden_directory_holds_the_32_streams(golden):
    assert len(golden) == 32, sorted(golden)


def test_pyarrow_client_reads_our_server_serving_the_golden_file(golden_path, golden, ours):
    _, expected, _ = golden[golden_name(golden_path)]
    client = pf.connect(ours["cpu"].location)
    got = client.do_get(pf.Ticket(f"file/{golden_name(golden_path)}")).read_all()
    assert_table_equal(got, expected)


def test_pyarrow_client_reads_our_server_serving_an_emulated_device_stream(golden_path, golden, ours):
    _, expected, _ = golden[golden_name(golden_path)]
    client = pf.connect(ours["cpu"].location)
    got = client.do_get(pf.Ticket(f"device/{golden_name(golden_path)}")).read_all()
    assert_table_equal(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_fetch_from_a_pyarrow_server_lands_on_the_device(golden_path, device, golden, peer):
    name = golden_name(golden_path)
    _, expected, _ = golden[name]
    stream = flight.fetch(peer.location, name, device_of(device))
    assert stream.device_type == device_of(device).type
    assert_table_equal(to_host_table(stream, device_of(device)), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_pyarrow_put_lands_in_our_sink_on_the_device(golden_path, device, golden, ours):
    name = golden_name(golden_path)
    _, expected, _ = golden[name]
    server = ours[device]
    writer, _ = pf.connect(server.location).do_put(pf.FlightDescriptor.for_path(name), expected.schema)
    writer.write_table(expected)
    writer.close()
    assert_table_equal(server.received.tables.pop(name), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_put_of_a_device_stream_reaches_a_pyarrow_server(golden_path, device, golden, peer, ours):
    name = golden_name(golden_path)
    _, expected, batches = golden[name]
    if device == "cpu":
        source = ipc.open_stream(golden_path)
    elif batches:
        source = ad.stream([ad.array(b, device=device_of(device)) for b in batches])
    else:
        # No batches: the relay's stream, on the emulated device too.
        source = flight.fetch(ours["cpu"].location, f"file/{name}", device_of(device))
    summary = flight.put(peer.location, name, source)
    assert summary == {"batches": len(batches), "rows": expected.num_rows, "complete": True}
    assert_table_equal(peer.stored.pop(name), expected)


def test_fetch_of_our_own_server_lands_the_file_on_the_emulated_device(golden_path, golden, ours):
    """Both ends ours: the file read by the server, landed on the device."""
    name = golden_name(golden_path)
    _, expected, _ = golden[name]
    stream = flight.fetch(ours["cpu"].location, f"file/{name}", device_of("emulated"))
    assert_table_equal(to_host_table(stream, device_of("emulated")), expected)


# --- the API ------------------------------------------------------------------


SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())], metadata={"origin": "test"})


def numbers(batches=3, rows=4):
    return [
        pa.record_batch([pa.array(range(i * rows, (i + 1) * rows)), pa.array([f"v{i}"] * rows)], schema=SCHEMA)
        for i in range(batches)
    ]


def failing_reader(good=2, message="the disk went away"):
    """A pyarrow reader of `good` batches, then an exception."""

    def batches():
        yield from numbers(good)
        raise ValueError(message)

    return pa.RecordBatchReader.from_batches(SCHEMA, batches())


def test_flight_is_a_submodule_with_its_api():
    assert ad.flight is flight
    assert set(flight.__all__) == {"FlightError", "FlightInfo", "FlightServer", "fetch", "list_flights", "put", "serve"}
    assert issubclass(flight.FlightError, RuntimeError)


def test_the_modules_example_runs():
    """The docstring's example (help() is the first documentation)."""
    import doctest

    result = doctest.testmod(flight)
    # The module's example, and those of the classes it defines.
    assert result.attempted >= 4 and result.failed == 0, result


def test_a_server_is_a_context_manager_that_shuts_down():
    table = pa.Table.from_batches(numbers())
    with flight.serve({"t": lambda: table}) as server:
        assert server.location == f"grpc://127.0.0.1:{server.port}"
        assert server.port > 0 and not server.closed
        assert repr(server) == f"FlightServer({server.location}, serving)"
        assert to_host_table(flight.fetch(server.location, "t"), ad.cpu()).equals(table)
    assert server.closed and server.active_requests == 0
    assert repr(server).endswith("shut down)")
    raises_cleanly(lambda: flight.fetch(server.location, "t"), flight.FlightError, "cannot connect to", server.location)
    server.shutdown()  # a second shutdown does nothing


def test_fetch_takes_str_and_bytes_tickets_and_device_none_is_the_cpu():
    table = pa.Table.from_batches(numbers())
    with flight.serve({"t": lambda: table}) as server:
        for ticket in ("t", b"t"):
            stream = flight.fetch(server.location, ticket)
            assert stream.device_type == ad.DeviceType.CPU
            assert pa.RecordBatchReader.from_stream(stream).read_all().equals(table)


def test_a_callable_source_is_called_for_each_do_get():
    calls = []

    def open_table():
        calls.append(threading.current_thread().name)
        return pa.Table.from_batches(numbers())

    with flight.serve({"t": open_table}) as server:
        listed = flight.list_flights(server.location)
        before = len(calls)
        for _ in range(3):
            assert to_host_table(flight.fetch(server.location, "t"), ad.cpu()).num_rows == 12
    assert len(calls) - before == 3
    # Called on the server's threads, with the GIL taken there.
    assert all(name != threading.current_thread().name for name in calls)
    assert [info.name for info in listed] == ["t"]


def test_a_stream_source_is_served_once_then_failed_precondition():
    with flight.serve({"once": pa.RecordBatchReader.from_batches(SCHEMA, numbers())}) as server:
        first = to_host_table(flight.fetch(server.location, "once"), ad.cpu())
        assert first.equals(pa.Table.from_batches(numbers()))
        raises_cleanly(
            lambda: flight.fetch(server.location, "once"),
            flight.FlightError,
            r"do_get at grpc://127\.0\.0\.1:\d+: FAILED_PRECONDITION \(9\)",
            'source "once" is a stream that can be read once, and was already served',
        )
        # The listing still has its schema.
        (info,) = flight.list_flights(server.location)
        assert pa.schema(info).equals(SCHEMA, check_metadata=True)


def test_sources_of_every_kind(tmp_path):
    """A path (str and os.PathLike) of the streaming and the file format,
    an iterable of arrays, a DeviceStream, a pyarrow table."""
    table = pa.Table.from_batches(numbers())
    streaming = tmp_path / "t.arrows"
    with ipc.new_stream(streaming, SCHEMA) as writer:
        writer.write_table(table)
    file_format = tmp_path / "t.arrow"
    with ipc.new_file(file_format, SCHEMA) as writer:
        writer.write_table(table)
    sources = {
        "streaming": str(streaming),
        "file": file_format,
        "arrays": [ad.array(b) for b in numbers()],
        "device stream": ad.stream([ad.array(b, device=device_of("emulated")) for b in numbers()]),
        "table": table,
    }
    with flight.serve(sources) as server:
        for name in sources:
            got = pf.connect(server.location).do_get(pf.Ticket(name)).read_all()
            assert_table_equal(got, table)


def test_list_flights_names_every_source_with_its_schema_and_ticket(golden, ours):
    infos = flight.list_flights(ours["cpu"].location)
    assert sorted(info.name for info in infos) == sorted(f"{kind}/{name}" for kind in ("file", "device") for name in golden)
    for info in infos:
        name = info.name.split("/", 1)[1]
        assert info.descriptor == [info.name]
        assert info.tickets == [info.name.encode()]
        assert (info.total_records, info.total_bytes) == (-1, -1)
        assert pa.schema(info).equals(golden[name][1].schema, check_metadata=True), info.name
    assert repr(infos[0]).startswith(f'FlightInfo(name="{infos[0].name}", schema=Struct(')


def test_list_flights_of_a_pyarrow_server_reads_its_descriptors():
    class Lister(pf.FlightServerBase):
        def list_flights(self, context, criteria):
            yield pf.FlightInfo(SCHEMA, pf.FlightDescriptor.for_path("a", "b"), [pf.FlightEndpoint(b"t1", [])], 12, 99)
            yield pf.FlightInfo(SCHEMA, pf.FlightDescriptor.for_command(b"SELECT 1"), [], -1, -1)

    server = Lister("grpc://127.0.0.1:0")
    try:
        path, command = flight.list_flights(f"grpc://127.0.0.1:{server.port}")
    finally:
        server.shutdown()
    assert (path.name, path.descriptor, path.tickets, path.total_records, path.total_bytes) == ("a/b", ["a", "b"], [b"t1"], 12, 99)
    assert (command.name, command.descriptor, command.tickets) == (None, b"SELECT 1", [])
    assert pa.schema(command).equals(SCHEMA, check_metadata=True)


# --- faults ---------------------------------------------------------------------


def test_a_missing_or_wrong_token_is_refused_and_the_server_serves_the_next_client():
    table = pa.Table.from_batches(numbers())
    with flight.serve({"t": lambda: table}, token="s3cret") as server:
        raises_cleanly(
            lambda: flight.fetch(server.location, "t"),
            flight.FlightError,
            "do_get at grpc://127.0.0.1:",
            r"UNAUTHENTICATED \(16\)",
            "requires a bearer token",
            "none was sent",
        )
        raises_cleanly(
            lambda: flight.fetch(server.location, "t", token="guess"),
            flight.FlightError,
            r"UNAUTHENTICATED \(16\): the bearer token is wrong",
        )
        raises_cleanly(
            lambda: flight.list_flights(server.location, token="guess"),
            flight.FlightError,
            r"list_flights at .*UNAUTHENTICATED",
        )
        client = pf.connect(server.location)
        with pytest.raises(pf.FlightUnauthenticatedError, match="requires a bearer token"):
            client.do_get(pf.Ticket("t")).read_all()
        wrong = pf.FlightCallOptions(headers=[(b"authorization", b"Bearer guess")])
        with pytest.raises(pf.FlightUnauthenticatedError, match="the bearer token is wrong"):
            client.do_get(pf.Ticket("t"), wrong).read_all()
        # The next clients, with the token, are served.
        assert to_host_table(flight.fetch(server.location, "t", token="s3cret"), ad.cpu()).equals(table)
        right = pf.FlightCallOptions(headers=[(b"authorization", b"Bearer s3cret")])
        assert client.do_get(pf.Ticket("t"), right).read_all().equals(table)


def test_fetching_an_unknown_name_is_not_found_naming_it_and_the_known_ones():
    with flight.serve({"a": lambda: pa.Table.from_batches(numbers()), "b": [ad.array(numbers()[0])]}) as server:
        raises_cleanly(
            lambda: flight.fetch(server.location, "zzz"),
            flight.FlightError,
            rf"do_get at {server.location}: NOT_FOUND \(5\)",
            r'no source named "zzz"; this server has \["a", "b"\]',
        )
        with pytest.raises(pa.ArrowKeyError, match="Flight returned not found error.*no source named \"zzz\""):
            pf.connect(server.location).do_get(pf.Ticket("zzz")).read_all()


def test_a_sink_that_raises_fails_the_put_with_its_message():
    def refuse(descriptor, stream):
        next(iter(stream))
        raise KeyError(f"no room for {descriptor}")

    table = pa.Table.from_batches(numbers())
    with flight.serve({}, sink=refuse) as server:
        raises_cleanly(
            lambda: flight.put(server.location, "up", table),
            flight.FlightError,
            rf"do_put at {server.location}: INTERNAL \(13\)",
            "the sink refused the upload",
            r"KeyError: \"no room for \['up'\]\"",
        )
        writer, _ = pf.connect(server.location).do_put(pf.FlightDescriptor.for_path("up"), SCHEMA)
        with pytest.raises(pf.FlightInternalError, match=r"KeyError: \"no room for \['up'\]\""):
            writer.write_table(table)
            writer.close()


def test_a_server_without_a_sink_refuses_uploads():
    with flight.serve({}) as server:
        raises_cleanly(
            lambda: flight.put(server.location, "up", pa.Table.from_batches(numbers())),
            flight.FlightError,
            r"UNIMPLEMENTED \(12\)",
            "accepts no uploads",
        )


def test_a_sink_receives_the_descriptor_and_a_stream_valid_during_the_call_only():
    kept = []

    def keep(descriptor, stream):
        kept.append((descriptor, stream))

    with flight.serve({}, sink=keep) as server:
        # The sink returns without reading, and the server answers OK at
        # once: the put ends there, having sent the batches it had sent by
        # then (0 to 3), and says whether that was the whole source.
        summary = flight.put(server.location, "up", pa.Table.from_batches(numbers()))
        assert summary["batches"] <= 3 and summary["rows"] == 4 * summary["batches"], summary
        assert summary["complete"] in (True, False)
        if summary["complete"]:
            assert summary["batches"] == 3, summary
        writer, _ = pf.connect(server.location).do_put(pf.FlightDescriptor.for_command(b"cmd"), SCHEMA)
        writer.close()
    assert [descriptor for descriptor, _ in kept] == [["up"], b"cmd"]
    raises_cleanly(
        lambda: next(iter(kept[0][1])),
        ValueError,
        "the sink's stream is read during the sink's call only",
    )


@pytest.mark.parametrize("kind", ["stream object", "callable"])
def test_a_source_that_raises_mid_stream_fails_the_fetch_naming_the_source(kind):
    """Never a shorter table: each client gets the batches before the error,
    then an error that names the source and carries its message."""
    source = failing_reader() if kind == "stream object" else failing_reader
    with flight.serve({"flaky": source}) as server:
        stream = iter(flight.fetch(server.location, "flaky"))
        assert [len(next(stream)) for _ in range(2)] == [4, 4]
        raises_cleanly(
            lambda: next(stream),
            flight.FlightError,
            rf"do_get at {server.location}: INTERNAL \(13\)",
            'source "flaky"',
            "batch 2",
            "the disk went away",
        )
    with flight.serve({"flaky": failing_reader}) as server:
        # Through the C stream, as a consumer reads it: get_next's EIO, which
        # pyarrow raises as OSError, with the whole message.
        exported = pa.RecordBatchReader.from_stream(flight.fetch(server.location, "flaky"))
        with pytest.raises(OSError, match='do_get at .*source "flaky".*the disk went away'):
            exported.read_all()
        with pytest.raises(pf.FlightInternalError, match='source "flaky".*the disk went away'):
            pf.connect(server.location).do_get(pf.Ticket("flaky")).read_all()


def test_a_source_callable_that_raises_or_returns_no_stream_fails_the_do_get():
    sources = {"raises": lambda: 1 / 0, "int": lambda: 42}
    with flight.serve(sources) as server:
        raises_cleanly(
            lambda: flight.fetch(server.location, "raises"),
            flight.FlightError,
            r"INTERNAL \(13\)",
            'source "raises" failed to open',
            "ZeroDivisionError: division by zero",
        )
        raises_cleanly(
            lambda: flight.fetch(server.location, "int"),
            flight.FlightError,
            'source "int" failed to open',
            r"TypeError: expected an object with __arrow_c_device_stream__ .* got int",
        )


def test_a_put_whose_source_raises_mid_stream_reaches_the_sink_as_an_error():
    """The upload is cancelled, so the sink sees an error after the batches
    before it, never a shorter upload that looks whole; the put raises with
    the source's message."""
    seen = []

    def record(descriptor, stream):
        rows = []
        try:
            for batch in stream:
                rows.append(len(batch))
        except flight.FlightError as error:
            seen.append((rows, str(error)))
            raise
        seen.append((rows, None))

    with flight.serve({}, sink=record) as server:
        raises_cleanly(
            lambda: flight.put(server.location, "up", failing_reader()),
            RuntimeError,
            "batch 2",
            "the disk went away",
        )
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(seen) == 1, seen
    rows, error = seen[0]
    assert rows == [4, 4][: len(rows)], rows
    assert error is not None and "do_put at the client at 127.0.0.1:" in error, seen


def test_connecting_nowhere_is_a_flight_error_naming_the_location():
    raises_cleanly(
        lambda: flight.fetch("grpc://127.0.0.1:1", "t"),
        flight.FlightError,
        "cannot connect to grpc://127.0.0.1:1",
        "Connection refused",
    )


BAD_ARGUMENTS = {
    "an http location": (lambda loc: flight.fetch("http://h:1", "t"), ValueError, 'location "http://h:1": the scheme "http"'),
    "no port": (lambda loc: flight.fetch("grpc://h", "t"), ValueError, "the port is missing"),
    "an int ticket": (lambda loc: flight.fetch(loc, 5), TypeError, "the ticket is str or bytes, got int"),
    "prefetch 0": (lambda loc: flight.fetch(loc, "t", prefetch=0), ValueError, "prefetch must be at least 1, got 0"),
    "not a device": (lambda loc: flight.fetch(loc, "t", "cpu"), TypeError, "Device"),
    "a root without TLS": (lambda loc: flight.fetch(loc, "t", tls_root=b"pem"), ValueError, "use grpc\\+tls://"),
    "a missing root file": (lambda loc: flight.fetch(loc, "t", tls_root="/nonexistent/ca.pem"), FileNotFoundError, "tls_root: reading /nonexistent/ca.pem"),
    "an int root": (lambda loc: flight.fetch(loc, "t", tls_root=3), TypeError, "tls_root is PEM: bytes, or the path"),
    "sources not a dict": (lambda loc: flight.serve([("a", "b")]), TypeError, "sources is a dict of names"),
    "a name not str": (lambda loc: flight.serve({1: lambda: None}), TypeError, "the names of sources are str, got int"),
    "an int source": (lambda loc: flight.serve({"a": 5}), TypeError, 'source "a": expected an object with __arrow_c_device_stream__'),
    "bytes as a source": (lambda loc: flight.serve({"a": b"xy"}), TypeError, 'source "a": expected a DeviceArray'),
    "an empty list source": (lambda loc: flight.serve({"a": []}), ValueError, 'source "a": an empty iterable gives a stream no type'),
    "a stream of non-batches": (lambda loc: flight.serve({"a": ad.stream([ad.array(pa.array([1]))])}), TypeError, 'source "a": a stream of Int64 arrays is not a stream of record batches'),
    "a missing file": (lambda loc: flight.serve({"a": "/nonexistent.arrows"}), FileNotFoundError, 'source "a": the IPC file /nonexistent.arrows'),
    "a sink not callable": (lambda loc: flight.serve({}, sink=3), TypeError, r"sink is a callable \(descriptor, stream\)"),
    "depth 0": (lambda loc: flight.serve({}, depth=0), ValueError, "depth must be at least 1, got 0"),
    "grpc+tls without tls": (lambda loc: flight.serve({}, "grpc+tls://127.0.0.1:0"), ValueError, "grpc\\+tls:// needs tls="),
    "tls on grpc://": (lambda loc: flight.serve({}, "grpc://127.0.0.1:0", tls=(b"c", b"k")), ValueError, "use grpc\\+tls://"),
    "tls not a pair": (lambda loc: flight.serve({}, tls=b"pem"), TypeError, r"tls is a \(certificate, key\) tuple"),
    "tls not PEM": (lambda loc: flight.serve({}, tls=(b"not pem", b"not pem")), ValueError, "TLS identity"),
    "a path in the location": (lambda loc: flight.serve({}, "grpc://127.0.0.1:0/x"), ValueError, "no path"),
    "a port in use": (lambda loc: flight.serve({}, loc), OSError, r"binding 127\.0\.0\.1:\d+: Address already in use"),
    "grace below 0": (lambda loc: flight.serve({}).shutdown(-1), ValueError, "grace is seconds, 0 or more, got -1"),
}


@pytest.mark.parametrize("case", BAD_ARGUMENTS, ids=list(BAD_ARGUMENTS))
def test_bad_arguments_raise_value_type_or_os_errors(case):
    call, expected, pattern = BAD_ARGUMENTS[case]
    with flight.serve({"t": lambda: pa.Table.from_batches(numbers())}) as server:
        raises_cleanly(lambda: call(server.location), expected, pattern)
        # The server still serves.
        assert to_host_table(flight.fetch(server.location, "t"), ad.cpu()).num_rows == 12


def test_a_server_and_its_clients_share_one_process_without_deadlock():
    """Every wait releases the GIL: the server's Python source (a generator,
    which takes the GIL for each batch), its sink, and its clients (ours and
    pyarrow's) all run in one process. A child with a timeout, so that a
    deadlock fails the test instead of hanging the suite."""
    script = """
import threading
import pyarrow as pa, pyarrow.flight as pf
import arrow_device as ad
from arrow_device import flight

def batches():
    for i in range(20):
        yield ad.array(pa.record_batch({"x": list(range(i, i + 100))}), device=ad.emulated(0))

got = []
def sink(descriptor, stream):
    got.append(sum(len(b) for b in stream))

with flight.serve({"gen": lambda: ad.stream(batches())}, sink=sink, sink_device=ad.emulated(0)) as server:
    results = []
    def client():
        stream = flight.fetch(server.location, "gen", ad.emulated(0), prefetch=1)
        results.append(sum(len(b) for b in stream))
        results.append(pf.connect(server.location).do_get(pf.Ticket("gen")).read_all().num_rows)
        results.append(flight.put(server.location, "up", ad.stream(batches()))["rows"])
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
print(sorted(results), got)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{[2000] * 12} {[2000] * 4}", result.stdout
