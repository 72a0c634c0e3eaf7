"""Local servers a test starts on 127.0.0.1 only: a minimal SMTP server (what smtplib
speaks: EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT) and an HTTP server taking POSTs."""

from __future__ import annotations

import base64
import contextlib
import email
import json
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Inbox:
    messages: list = field(default_factory=list)  # email.message.Message
    logins: list = field(default_factory=list)  # (user, password)
    posts: list = field(default_factory=list)  # (headers, json body)


class _SMTPHandler(socketserver.StreamRequestHandler):
    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def handle(self) -> None:
        inbox: Inbox = self.server.inbox  # type: ignore[attr-defined]
        self.reply("220 127.0.0.1 ESMTP test")
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            verb = line.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self.reply("250-127.0.0.1")
                self.reply("250 AUTH PLAIN")
            elif verb == "AUTH":
                _, user, password = base64.b64decode(line.split()[2]).decode().split("\0")
                inbox.logins.append((user, password))
                self.reply("235 2.7.0 authenticated")
            elif verb in ("MAIL", "RCPT", "RSET", "NOOP"):
                self.reply("250 OK")
            elif verb == "DATA":
                self.reply("354 end with .")
                body = []
                while (chunk := self.rfile.readline().decode()) not in (".\r\n", ".\n", ""):
                    body.append(chunk[1:] if chunk.startswith("..") else chunk)
                inbox.messages.append(email.message_from_string("".join(body)))
                self.reply("250 OK queued")
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("502 not implemented")


class _HTTPHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.inbox.posts.append((dict(self.headers), json.loads(body)))  # type: ignore[attr-defined]
        status = self.server.status  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:  # keep the test's output clean
        pass


@contextlib.contextmanager
def local_servers(http_status: int = 200) -> Iterator[tuple[Inbox, int, str]]:
    """(inbox, SMTP port, webhook URL), both servers bound to 127.0.0.1 only."""
    inbox = Inbox()
    smtp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SMTPHandler)
    smtp.daemon_threads = True
    smtp.inbox = inbox  # type: ignore[attr-defined]
    web = ThreadingHTTPServer(("127.0.0.1", 0), _HTTPHandler)
    web.inbox, web.status = inbox, http_status  # type: ignore[attr-defined]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (smtp, web)]
    for thread in threads:
        thread.start()
    try:
        yield inbox, smtp.server_address[1], f"http://127.0.0.1:{web.server_address[1]}/hook"
    finally:
        for server in (smtp, web):
            server.shutdown()
            server.server_close()
