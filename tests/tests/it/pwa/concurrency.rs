//! Races and secrecy: parallel wrong codes, racing completes, renew against sign out
//! everywhere, and no secret in any audit row or log line.

use k2b_tests::LogCapture;

use super::{Jar, Pwa, device_id};

/// Ten parallel confirms with wrong codes: never more than three attempts.
#[tokio::test]
async fn parallel_wrong_codes_never_exceed_three_attempts() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (id, secret) = pwa.start(&mut browser).await;
    let code = pwa.claim(&mut Jar::default(), &secret, "ios").await.body["code"]
        .as_str()
        .expect("code")
        .to_string();
    let wrong = if code == "999999" { "999998" } else { "999999" };
    let replies = futures::future::join_all((0..10).map(|_| {
        let mut jar = browser.clone();
        let pwa = &pwa;
        let id = id.clone();
        async move { pwa.confirm(&mut jar, &id, wrong).await }
    }))
    .await;
    let wrong_codes = replies.iter().filter(|r| r.code() == "WRONG_CODE").count();
    let expired = replies.iter().filter(|r| r.code() == "EXPIRED").count();
    assert_eq!(wrong_codes, 2, "{replies:?}");
    assert_eq!(expired, 8);
    let attempts: i16 =
        sqlx::query_scalar("SELECT failed_attempts FROM auth.pwa_pairings WHERE id = $1")
            .bind(uuid::Uuid::parse_str(&id).expect("uuid"))
            .fetch_one(&pwa.core.pool)
            .await
            .expect("row");
    assert_eq!(attempts, 3);
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(410, Some("EXPIRED"));
}

/// Two racing completes of one pairing make one device.
#[tokio::test]
async fn racing_completes_make_one_device() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, code) = pwa.claimed(&mut browser, &mut phone, "android").await;
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    let (mut a, mut b) = (phone.clone(), phone.clone());
    let (first, second) = tokio::join!(pwa.complete(&mut a), pwa.complete(&mut b));
    assert_eq!(first.status.as_u16(), 200, "{:?}", first.body);
    assert_eq!(second.status.as_u16(), 200, "{:?}", second.body);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM auth.pwa_devices WHERE user_id = $1")
        .bind(ada.id)
        .fetch_one(&pwa.core.pool)
        .await
        .expect("count");
    assert_eq!(count, 1);
    assert_eq!(device_id(&a), device_id(&b));
}

/// Scenario 15 and the race rule: renewals racing "sign out everywhere" neither deadlock nor
/// leave a live session.
#[tokio::test]
async fn renew_racing_sign_out_everywhere() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    for _ in 0..5 {
        let mut browser = pwa.browser(&ada).await;
        let (mut phone, _) = pwa.pair(&mut browser, "android").await;
        phone.remove("pwa_session");
        let mut racing = phone.clone();
        let (_, renewed) = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            tokio::join!(pwa.sign_out_everywhere(ada.id), pwa.renew(&mut racing))
        })
        .await
        .expect("no deadlock");
        assert!(
            [200, 401].contains(&renewed.status.as_u16()),
            "{:?}",
            renewed.body
        );
        assert!(pwa.probe(&racing).await.is_none(), "no live session");
        pwa.renew(&mut racing).await.expect(401, Some("UNPAIRED"));
    }
}

/// No secret of the flows (link secret, comparison code, completion secret, device key, tokens)
/// reaches an audit row or a log line.
#[tokio::test]
async fn no_secret_in_audit_rows_or_logs() {
    let logs = LogCapture::start();
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, secret) = pwa.start(&mut browser).await;
    let claimed = pwa.claim(&mut phone, &secret, "android").await;
    let code = claimed.body["code"].as_str().expect("code").to_string();
    let completion = phone.get("pwa_pairing").expect("completion secret");
    let wrong = if code == "000000" { "000001" } else { "000000" };
    pwa.confirm(&mut browser, &id, wrong).await;
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    pwa.complete(&mut phone).await.expect(200, None);
    let first_key = phone.get("pwa_device").expect("key");
    let first_session = phone.get("pwa_session").expect("session");
    phone.remove("pwa_session");
    pwa.renew(&mut phone).await.expect(200, None);
    let second_key = phone.get("pwa_device").expect("key");
    let second_session = phone.get("pwa_session").expect("session");
    pwa.unregister_shell().await;
    pwa.renew(&mut phone).await.expect(503, None);
    pwa.register_shell().await;
    pwa.send(
        http::Method::DELETE,
        "/pwa/_auth/session",
        &mut phone,
        super::Options::default(),
    )
    .await
    .expect(204, None);

    let web_token = browser.get("session_token").expect("token");
    let audit = serde_json::to_string(&pwa.audit_rows().await).expect("json");
    assert!(!logs.own_text().is_empty(), "the flows logged something");
    // Every thread's lines and every concurrent test's: a superset, which is what a scan needs.
    let log = logs.text();
    assert!(
        !super::contains_code(&audit, &code),
        "an audit row holds the code"
    );
    assert!(
        !super::contains_code(&log, &code),
        "a log line holds the code"
    );
    let secrets = [
        secret.as_str(),
        completion.as_str(),
        first_key.split('.').nth(1).expect("secret"),
        second_key.split('.').nth(1).expect("secret"),
        first_session.as_str(),
        second_session.as_str(),
        web_token.as_str(),
    ];
    for value in secrets {
        assert!(!audit.contains(value), "an audit row holds a secret");
        assert!(!log.contains(value), "a log line holds a secret");
    }
}
