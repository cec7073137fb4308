"""asyncssh's look for liboqs, started by the entry point in a thread (base/liboqs_lookup.py): the
import of asyncssh gets the same answers without looking again, and every other name is looked up."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHECK = textwrap.dedent("""
    import ctypes.util
    from specconsole.base import liboqs_lookup

    real = {name: ctypes.util.find_library(name) for name in liboqs_lookup.NAMES}
    before = ctypes.util.find_library
    with liboqs_lookup.answers():  # no thread started: find_library is left alone
        assert ctypes.util.find_library is before
    liboqs_lookup.start()
    assert liboqs_lookup._thread is not None
    liboqs_lookup._thread.join()
    looked = ctypes.util.find_library = lambda name: f"looked again for {name}"
    with liboqs_lookup.answers():
        got = [ctypes.util.find_library(name) for name in ("oqs", "liboqs", "c")]
    assert ctypes.util.find_library is looked
    first = liboqs_lookup.NAMES[0]
    expected_liboqs = real["liboqs"] if not real[first] else "looked again for liboqs"
    assert got == [real[first], expected_liboqs, "looked again for c"], (got, real)
    print("ok")
""")


def test_the_import_gets_the_thread_s_answers_and_other_names_are_looked_up_again() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_console_s_import_of_asyncssh_offers_the_same_key_exchanges() -> None:
    """With the look done beforehand, asyncssh's post-quantum key exchanges are what they are without."""
    script = textwrap.dedent("""
        import sys
        from specconsole.base import liboqs_lookup
        if sys.argv[1] == "early":
            liboqs_lookup.start()
        with liboqs_lookup.answers():
            import asyncssh
        from asyncssh.crypto import pq
        print(pq.mlkem_available, pq.sntrup_available, asyncssh.kex.get_default_kex_algs())
    """)
    said = [subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True,
                           timeout=60, check=True).stdout for how in ("early", "late")]
    assert said[0] == said[1] and said[0].strip()
