"""The operator's kubeconfig on this machine, as a client of the kubernetes library: the fleet
audit's cluster read and its reads through a node's Pod (``connectors.kubenode``). Only they
import this module: the lab's runs never load the kubernetes client (a second to import)."""

import os

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

CONNECT_TIMEOUT_S = 5  # a connection to the API server: one that accepts and then stalls ends here


def where(kubeconfig: str, context: str) -> str:
    """The cluster a kubeconfig and context name, in words.

        where("", "prod") -> "kubeconfig ~/.kube/config, context prod"
    """
    return (f"kubeconfig {kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}, "
            f"context {context or '(current)'}")


def api_client(kubeconfig: str, context: str) -> client.ApiClient:
    """A client of ``context`` (empty: the current one) in ``kubeconfig`` (empty: $KUBECONFIG or
    ~/.kube/config) that never retries: each request's deadline is its caller's.

        api_client("", "prod")  # raises ConfigException for a context the file lacks
    """
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig or None, context=context or None,
                            client_configuration=configuration)
    configuration.retries = False
    return client.ApiClient(configuration)


def in_words(e: Exception, deadline_s: float) -> str:
    """Why a request to the API server failed, in one sentence (no client's retry chatter).

        in_words(ApiException(status=403, reason="Forbidden"), 20) -> "the API server refused: 403 Forbidden"
    """
    if isinstance(e, ApiException):
        return f"the API server refused: {e.status} {e.reason}"
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        e = e.reason
    if isinstance(e, urllib3.exceptions.ConnectTimeoutError):
        return f"the API server did not complete a connection within {CONNECT_TIMEOUT_S}s (it accepts, then stalls)"
    if isinstance(e, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return f"the API server gave no answer within the read's {deadline_s}s"
    if isinstance(e, urllib3.exceptions.NewConnectionError):
        return f"the API server cannot be reached: {str(e).rsplit(': ', 1)[-1]}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
