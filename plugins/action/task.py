# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.task: the run is driven from the controller, so each
node's status change (and with ``logs``, each log line) is shown as it happens.

``${{ secrets.NAME }}`` the ``secrets`` option does not provide are taken from the controller's
secrets store (``gpufleet secret set``), decrypted with the play's vault secrets; a task that
needs none of them never opens the store. Nothing of the store goes into the result.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit as services
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.run_output import printer


def with_stored_secrets(params, read_store):
    """``params`` with ``secrets`` completed from the store, when the task references names the
    option lacks (actions.stored_secret_names). ``read_store(path)`` returns the store's
    mapping. A task file that does not load is left for ``actions.submit`` to report."""
    names, optional = actions.stored_secret_names(params)
    if not names and not optional:
        return params
    try:
        stored = read_store(secret_store.store_path(params.get("state_dir")))
    except secret_store.SecretStoreError:
        if names:
            raise
        return params   # a public repo needs no credential, nor the vault password
    return dict(params, secrets=secret_store.merge(params.get("secrets"), stored,
                                                   names + optional))


def service_token(params, loader):
    """``(digest, why)``: the SHA-256 of the submitting user's service token when ``params``
    submit a service, the token made in the store on first use with the play's vault secrets
    (services.submit.token_digest); ``why`` says why there is none (no vault password: the
    service runs all the same, and apply says so). ``(None, None)`` for a task."""
    def open_store():
        return secret_store.SecretStore.with_loader(
            secret_store.store_path(params.get("state_dir")), loader)

    try:
        return services.token_digest(params, open_store), None
    except secret_store.SecretStoreError as exc:
        return None, str(exc)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(
            argument_spec=actions.TASK_ARGS,
            mutually_exclusive=actions.TASK_MUTUALLY_EXCLUSIVE,
            required_one_of=actions.TASK_REQUIRED_ONE_OF,
        )
        params = actions.expand_paths(params)
        try:
            params = with_stored_secrets(
                params, lambda path: secret_store.read_with_loader(path, self._loader))
            digest, why = (None, None) if self._task.check_mode else service_token(
                params, self._loader)
            answer, failed = services.submit(params, emit=printer(params.get("output_path"),
                                                                  params.get("path")),
                                             check_mode=bool(self._task.check_mode),
                                             token_digest=digest, token_error=why,
                                             gate=dependencies.gate)
        except (actions.ActionError, secret_store.SecretStoreError) as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(answer)
        if failed:
            result.update(failed=True, msg=actions.failure_summary(answer))
        return result
