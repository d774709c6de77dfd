"""Arrow Flight for device data: a remote dataset arrives as a
``DeviceStream`` on the device you choose, and any Python stream is served
to any Flight client (pyarrow's, Arrow C++'s, Java's, arrow-rs').

>>> import arrow_device as ad, pyarrow as pa
>>> from arrow_device import flight
>>> table = pa.table({"x": [1, 2, 3]})
>>> with flight.serve({"numbers": lambda: table}) as server:
...     stream = flight.fetch(server.location, "numbers", ad.emulated())
...     [pa.record_batch(b.to(ad.cpu())).num_rows for b in stream]
[3]

* ``fetch(location, ticket, device=None, ...)``: ``do_get``, each batch copied
  onto ``device`` as it arrives (its copy's event is the batch's
  ``sync_event``), at most ``prefetch`` batches ahead of the reader.
* ``put(location, name, source, ...)``: ``do_put`` of any stream.
* ``list_flights(location, ...)``: ``FlightInfo`` objects (name, tickets and
  ``__arrow_c_schema__``).
* ``serve(sources, ...)``: a ``FlightServer`` serving named sources through
  ``list_flights``, ``get_flight_info``, ``get_schema`` and ``do_get``, and
  uploads through ``do_put`` to a Python ``sink``.

Errors of the peer or the network raise ``FlightError`` (a
``RuntimeError``) whose message names the location, the call and the gRPC
status code; bad arguments raise ``ValueError`` or ``TypeError``. Every call
that waits runs without the GIL, so a server and its clients may share one
process.
"""

from ._arrow_device import FlightError, FlightInfo, FlightServer
from ._arrow_device import flight_fetch as fetch
from ._arrow_device import flight_list_flights as list_flights
from ._arrow_device import flight_put as put
from ._arrow_device import flight_serve as serve

__all__ = ["FlightError", "FlightInfo", "FlightServer", "fetch", "list_flights", "put", "serve"]
