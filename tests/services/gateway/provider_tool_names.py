"""Tool names the gateway must be able to show: the catalog's providers', the test peers' and server-everything's.

The catalog's definitions hold no tool names (a connection's tools are indexed from its provider when it is made), so
`CATALOG_TOOLS` keeps, per catalog app, names its provider's MCP server publishes as its public documentation gave
them when this was written (the long, dotted, camel-cased and hyphenated ones in particular); `custom` gets names any
self-hosted server may choose. The peers' names are read from their sources (`tests/peers/*.py`: every
`add_tool(<function>)`, or its `name=`), server-everything's from its installed package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.peers import everything

PEERS = Path(__file__).resolve().parents[2] / "peers"

CATALOG_TOOLS: dict[str, list[str]] = {
    "asana": [
        "asana_get_project_task_counts",
        "asana_get_tasks_for_project",
        "asana_search_tasks",
        "asana_create_task_story",
        "asana_get_portfolio_items",
        "asana_typeahead_search",
    ],
    "atlassian": [
        "getAccessibleAtlassianResources",
        "getConfluencePageFooterComments",
        "getConfluencePageInlineComments",
        "createConfluenceFooterComment",
        "searchConfluenceUsingCql",
        "getJiraIssueRemoteIssueLinks",
        "getJiraProjectIssueTypesMetadata",
        "getTransitionsForJiraIssue",
        "lookupJiraAccountId",
        "searchJiraIssuesUsingJql",
    ],
    "box": [
        "search_files_keyword",
        "get_file_content",
        "ai_qa_single_file",
        "list_folder_content_by_folder_id",
    ],
    "canva": ["generate-design", "export-design", "get-design-content", "resize-design", "comment-on-design"],
    "cloudflare": [
        "accounts_list",
        "workers_list",
        "workers_get_worker_code",
        "kv_namespaces_list",
        "search_cloudflare_documentation",
        "migrate_pages_to_workers_guide",
    ],
    "cognee": ["cognify", "codify", "search", "list_data", "delete", "prune", "cognify_status"],
    "custom": [
        "files.read",
        "files/write",
        "run query",
        "crm.contacts.search_by_email_address",
        "Überweisung_ausführen",
        "検索",
        "namespace:tool",
        "a" * 64,
        "tool_with_a_name_that_is_exactly_long_enough_to_need_shortening",
    ],
    "figma": [
        "get_design_context",
        "get_variable_defs",
        "get_code_connect_map",
        "get_screenshot",
        "get_metadata",
    ],
    "github": [
        "create_or_update_file",
        "search_repositories",
        "get_pull_request_review_comments",
        "create_pull_request_with_copilot",
        "list_code_scanning_alerts",
        "get_secret_scanning_alert",
        "add_pull_request_review_comment_to_pending_review",
        "submit_pending_pull_request_review",
        "list_workflow_runs",
        "get_job_logs",
    ],
    "honcho": [
        "search_memory",
        "save_memory",
        "list_workspaces",
        "get_peer_representation",
        "create_session",
    ],
    "hubspot": [
        "hubspot-get-user-details",
        "hubspot-list-objects",
        "hubspot-search-objects",
        "hubspot-batch-create-associations",
        "hubspot-get-association-definitions",
        "hubspot-generate-feedback-link",
    ],
    "intercom": [
        "search",
        "fetch",
        "search_conversations",
        "get_conversation",
        "search_contacts",
        "get_contact",
    ],
    "linear": [
        "list_issues",
        "get_issue",
        "create_issue",
        "list_my_issues",
        "list_issue_statuses",
        "get_issue_git_branch_name",
        "list_project_labels",
        "search_documentation",
    ],
    "mem0": ["add_memory", "search_memories", "get_memories", "update_memory", "delete_all_memories"],
    "monday": [
        "get_board_items_by_name",
        "create_item",
        "change_item_column_values",
        "get_board_schema",
        "list_users_and_teams",
        "create_update",
    ],
    "neon": [
        "list_projects",
        "run_sql_transaction",
        "describe_table_schema",
        "prepare_database_migration",
        "complete_database_migration",
        "explain_sql_statement",
        "provision_neon_auth",
    ],
    "notion": [
        "notion-search",
        "notion-fetch",
        "notion-create-pages",
        "notion-update-page",
        "notion-move-pages",
        "notion-duplicate-page",
        "notion-create-database",
        "notion-get-comments",
    ],
    "paypal": [
        "create_invoice",
        "list_invoices",
        "send_invoice_reminder",
        "list_transactions",
        "create_subscription_plan",
        "show_subscription_details",
    ],
    "sentry": [
        "find_organizations",
        "get_issue_details",
        "analyze_issue_with_seer",
        "search_events",
        "search_issues",
        "find_releases",
        "get_trace_details",
    ],
    "slack": [
        "slack_send_message",
        "slack_search_public",
        "slack_search_public_and_private",
        "slack_read_channel",
        "slack_read_thread",
        "slack_create_canvas",
    ],
    "square": ["get_service_info", "get_type_info", "make_api_request"],
    "stripe": [
        "create_customer",
        "list_payment_intents",
        "create_payment_link",
        "list_subscriptions",
        "search_stripe_documentation",
        "retrieve_balance",
    ],
    "supabase": [
        "list_tables",
        "apply_migration",
        "execute_sql",
        "get_advisors",
        "generate_typescript_types",
        "list_edge_functions",
        "deploy_edge_function",
        "get_project_url",
    ],
    "supermemory": ["addMemory", "search", "getProjects", "whoAmI", "memory"],
    "vercel": [
        "search_vercel_documentation",
        "list_projects",
        "get_deployment_build_logs",
        "list_deployments",
        "check_domain_availability_and_price",
    ],
    "webflow": [
        "sites_list",
        "collections_items_create_item_live",
        "collections_items_update_items_live",
        "pages_update_static_content",
        "ask_webflow_ai",
    ],
    "zapier": [
        "gmail_send_email",
        "google_sheets_create_spreadsheet_row_at_top_of_spreadsheet",
        "slack_send_direct_message",
        "google_calendar_find_events",
        "add_tools",
        "edit_tools",
    ],
    "zep": ["search_graph", "add_episode", "get_user_context", "search_facts", "get_episodes"],
}


def peer_tools() -> list[str]:
    """The tool names the test peers register (`add_tool(<function>)` or `add_tool(..., name=...)`)."""
    found: set[str] = set()
    for path in sorted(PEERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_tool"
            ):
                continue
            receiver = node.func.value
            if (
                isinstance(receiver, ast.Attribute)
                and isinstance(receiver.value, ast.Name)
                and receiver.value.id == "self"
            ):
                continue  # the peer class's own registration helper
            named = [k.value for k in node.keywords if k.arg == "name"]
            if named and isinstance(named[0], ast.Constant) and isinstance(named[0].value, str):
                found.add(named[0].value)
            elif node.args and isinstance(node.args[0], ast.Name):
                found.add(node.args[0].id)
    return sorted(found)


def everything_tools() -> list[str]:
    """server-everything's tool names (`const name = "..."` in each of its tools), when it is installed."""
    folder = everything.PACKAGE / "dist" / "tools"
    names: set[str] = set()
    for path in sorted(folder.glob("*.js")) if folder.exists() else []:
        names.update(re.findall(r'^const name = "([^"]+)";', path.read_text(), flags=re.MULTILINE))
    return sorted(names)
