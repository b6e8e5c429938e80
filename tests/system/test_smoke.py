from tests.conftest import backend_name, sign_in


def test_healthz_checks_the_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json == {"status": "ok", "database": backend_name()}


def test_readyz_reports_the_database_the_schema_the_settings_the_catalog_and_the_throttle_store(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json == {
        "status": "ready",
        "database": "ok",
        "schema": "ok",
        "settings": "not checked",
        "catalog": {"status": "current"},
        "throttle_store": {"kind": "database", "status": "ok"},
    }


def test_signed_in_member_sees_the_company_home(client, make):
    company = make.company("Widgets Inc")
    user = make.member(company, "member")
    sign_in(client, user)
    page = client.get("/")
    assert page.status_code == 200
    assert "Widgets Inc" in page.get_data(as_text=True)
