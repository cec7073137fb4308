"""The flight recorder: a fleet's samples, connection changes, events and action steps on one
timeline in a file, and the readers of that file.

- :mod:`~specconsole.recorder.recorder`: :class:`Recorder` (listeners append, a thread writes);
- :mod:`~specconsole.recorder.store`: the file format (CRC'd blocks of zstd-streamed msgpack);
- :mod:`~specconsole.recorder.records`: the records and :class:`FleetState` rebuilt from them;
- :mod:`~specconsole.recorder.recording`: reading: the fleet at a time, a cursor, ``--diff``;
- :mod:`~specconsole.recorder.tmux`: ``status --tmux``'s line (imports nothing heavy).

The replay console is :mod:`specconsole.ui.console.replay`. Nothing is imported here, so that
``status --tmux`` loads only what it uses.
"""
