"""A stdio "server" for byte-exact proxy tests: writes a fixed script of bytes to stdout (in
pieces, some lines split across writes), writes to stderr, copies everything it reads on stdin
into the file named by argv[1], then exits with the code in argv[2]."""

import os
import sys

LONG = b'{"jsonrpc":"2.0","id":"big","result":{"text":"' + b"x" * 3_000_000 + b'"}}\n'
SCRIPT = [
    b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}\n',
    b"not json at all\r\n",
    b'{"jsonrpc":"2.0","method":"bad \xff\xfe utf8"}\n',
    b'{"jsonrpc":"2.0","id":7,',  # a line split across two writes
    b'"result":{}}\n',
    LONG,
]
TAIL = b'{"jsonrpc":"2.0","method":"notifications/bye"}\n'
STDERR = b"starting \xe2\x9c\x93 \xff raw bytes\n"


def main() -> int:
    for piece in SCRIPT:
        os.write(1, piece)
    os.write(2, STDERR)
    with open(sys.argv[1], "wb") as received:
        while chunk := os.read(0, 65536):
            received.write(chunk)
    os.write(1, TAIL)
    return int(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
