//! The database: vouchers and orders, on SQLite (default) or PostgreSQL.
//!
//! One code path through sqlx's `Any` driver: every statement here is plain
//! SQL both engines accept (`$n` placeholders, `ON CONFLICT DO NOTHING`,
//! `RETURNING`), and only the first migration differs (the id column type).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, Row};

/// Which engine a URL names; decides the migration flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `sqlite://path` (or `sqlite::memory:`).
    Sqlite,
    /// `postgres://` or `postgresql://`.
    Postgres,
}

impl Engine {
    /// The engine a database URL names.
    ///
    /// # Errors
    /// For any other scheme.
    pub fn of_url(url: &str) -> Result<Engine, sqlx::Error> {
        if url.starts_with("sqlite:") {
            Ok(Engine::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Engine::Postgres)
        } else {
            Err(sqlx::Error::Configuration(
                format!("unsupported DATABASE_URL {url:?}: use sqlite:// or postgres://").into(),
            ))
        }
    }
}

/// The migrations, embedded in the binary so a deployed service needs no
/// files beside it.
#[derive(Debug, Clone, Copy)]
struct Embedded(Engine);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send>> {
        let sql: [(i64, &'static str, &'static str); 3] = match self.0 {
            Engine::Sqlite => [
                (
                    1,
                    "init",
                    include_str!("../migrations/sqlite/0001_init.sql"),
                ),
                (
                    2,
                    "stock may go negative",
                    include_str!("../migrations/sqlite/0002_stock_may_go_negative.sql"),
                ),
                (
                    3,
                    "pipeline state",
                    include_str!("../migrations/sqlite/0003_pipeline_state.sql"),
                ),
            ],
            Engine::Postgres => [
                (
                    1,
                    "init",
                    include_str!("../migrations/postgres/0001_init.sql"),
                ),
                (
                    2,
                    "stock may go negative",
                    include_str!("../migrations/postgres/0002_stock_may_go_negative.sql"),
                ),
                (
                    3,
                    "pipeline state",
                    include_str!("../migrations/postgres/0003_pipeline_state.sql"),
                ),
            ],
        };
        let migrations = sql
            .into_iter()
            .map(|(version, name, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(name),
                    MigrationType::Simple,
                    Cow::Borrowed(sql),
                    false,
                )
            })
            .collect();
        Box::pin(async move { Ok(migrations) })
    }
}

/// A voucher as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voucher {
    /// Database id; also the hash tag of every Redis key of the voucher.
    pub id: i64,
    /// Shown to buyers.
    pub title: String,
    /// Items put on sale.
    pub stock_total: i64,
    /// Items left according to the database.
    pub stock: i64,
    /// Sale window start, Unix epoch milliseconds.
    pub begin_ms: i64,
    /// Sale window end (exclusive), Unix epoch milliseconds.
    pub end_ms: i64,
    /// How many stock segments the `segmented` strategy splits the stock into.
    pub segments: i64,
    /// When the pipeline wrote the last order of the finished sale (Unix
    /// ms); `None` while the order stream may still hold work.
    pub drained_ms: Option<i64>,
}

impl Voucher {
    /// True once the sale window has closed at `now_ms`.
    pub fn has_ended(&self, now_ms: i64) -> bool {
        now_ms >= self.end_ms
    }
}

/// An order as stored (written orders only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// The id handed to the buyer when the purchase was accepted.
    pub id: i64,
    /// What was bought.
    pub voucher_id: i64,
    /// Who bought it.
    pub user_id: i64,
}

/// What writing one order did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Inserted, and the voucher's database stock decremented.
    Created,
    /// This very order id was written before (a replayed stream entry).
    AlreadyWritten,
    /// The user already has another order for this voucher.
    DuplicateUser,
    /// Another order already has this id: the id sequence restarted (Redis
    /// lost its data) within the same second. Nothing was written.
    IdTaken,
    /// The database's stock is exhausted: the gate in front let one buyer
    /// too many through (or, for the `optimistic` strategy, whose gate this
    /// is, the item is sold out). Nothing was written.
    StockExhausted,
    /// The order was given up on ([`Db::abandon_order`]) before this write
    /// got to it: its item went back on sale. Nothing was written.
    Abandoned,
}

/// How an order write decrements the database stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockGuard {
    /// `stock = stock - 1 WHERE stock > 0`: the decrement and the check are
    /// one statement, so the stock never goes below zero whatever the gate
    /// in front did. The safe strategies write this way.
    Enforce,
    /// `stock = stock - 1`, unconditionally: what the racy strategies of the
    /// original experiment do after checking the stock elsewhere, so their
    /// oversell is written (negative stock, more orders than items).
    Unguarded,
}

/// Time bounds of every database call.
#[derive(Debug, Clone, Copy)]
pub struct DbOptions {
    /// Longest wait for a pooled connection.
    pub acquire_timeout: Duration,
    /// Longest run of one statement: PostgreSQL's `statement_timeout`,
    /// SQLite's `busy_timeout` (how long a writer waits for the lock).
    pub statement_timeout: Duration,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            acquire_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
        }
    }
}

/// True for database errors that go away by themselves: the connection
/// was lost or refused, the server is shutting down or read-only (a
/// failover), out of disk or memory, a lock or statement timeout, a
/// serialization conflict. Retrying such a write later succeeds; anything
/// else is a problem with the write itself.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if code.chars().all(|c| c.is_ascii_digit()) && !code.is_empty() {
                // SQLite: the primary result code is the low byte of the
                // extended one. BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL,
                // CANTOPEN.
                let primary = code.parse::<u32>().unwrap_or(0) & 0xff;
                return matches!(primary, 5 | 6 | 7 | 8 | 10 | 13 | 14);
            }
            // PostgreSQL SQLSTATE: connection exceptions, insufficient
            // resources (disk full, out of memory, too many connections),
            // operator intervention (shutdown, statement timeout, cannot
            // connect now), system errors, read-only transaction (a
            // standby after failover), serialization failure and deadlock,
            // lock not available.
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57")
                || code.starts_with("58")
                || code == "25006"
                || code == "40001"
                || code == "40P01"
                || code == "55P03"
        }
        _ => false,
    }
}

/// True when a failed write may still have committed: the connection
/// died or the protocol broke mid-flight, so the database may have
/// received (and applied) the COMMIT without the reply reaching us. Errors
/// the database answered with, and failures to get a connection at all,
/// wrote nothing.
pub fn may_have_committed(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed
    )
}

/// The order database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Db {
    /// Shared connection pool.
    pool: AnyPool,
    /// Which engine, for the few places that differ.
    engine: Engine,
}

/// Current Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Db {
    /// Connects and runs the migrations.
    ///
    /// # Errors
    /// Unsupported URL, unreachable database, or a failed migration.
    pub async fn connect(url: &str, limits: DbOptions) -> Result<Db, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let statement_ms = limits.statement_timeout.as_millis().max(1) as u64;
        let engine = Engine::of_url(url)?;
        let options = AnyConnectOptions::from_str(url)?;
        let pool = AnyPoolOptions::new()
            // SQLite serializes writers anyway; a few connections keep reads
            // from queueing behind writes.
            .max_connections(match engine {
                Engine::Sqlite => 4,
                Engine::Postgres => 16,
            })
            .acquire_timeout(limits.acquire_timeout)
            // No ping before each use: a dead connection shows as the
            // query's I/O error, which every writer handles (the pipeline
            // and the purchases retry in doubt), and the round trip saved
            // is one per statement.
            .test_before_acquire(false)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if engine == Engine::Sqlite {
                        // WAL lets readers run beside the single writer;
                        // NORMAL sync is durable across process crashes.
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA synchronous = NORMAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query(&format!("PRAGMA busy_timeout = {statement_ms}"))
                            .execute(&mut *conn)
                            .await?;
                    } else {
                        sqlx::query(&format!("SET statement_timeout = {statement_ms}"))
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let migrator = Migrator::new(Embedded(engine))
            .await
            .map_err(|e| sqlx::Error::Migrate(Box::new(e)))?;
        migrator
            .run(&pool)
            .await
            .map_err(|e| sqlx::Error::Migrate(Box::new(e)))?;
        Ok(Db { pool, engine })
    }

    /// The engine behind this pool.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Inserts a voucher with its full stock and returns it.
    ///
    /// The caller seeds Redis inside `seed` before the insert commits, so a
    /// voucher exists in both places or in neither.
    pub async fn create_voucher<F, Fut, E>(
        &self,
        title: &str,
        stock: i64,
        begin_ms: i64,
        end_ms: i64,
        segments: i64,
        seed: F,
    ) -> Result<Voucher, E>
    where
        F: FnOnce(Voucher) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: From<sqlx::Error>,
    {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "INSERT INTO vouchers (title, stock_total, stock, begin_ms, end_ms, segments, created_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(title)
        .bind(stock)
        .bind(stock)
        .bind(begin_ms)
        .bind(end_ms)
        .bind(segments)
        .bind(now_ms())
        .fetch_one(&mut *tx)
        .await?;
        let voucher = Voucher {
            id: row.try_get(0)?,
            title: title.to_owned(),
            stock_total: stock,
            stock,
            begin_ms,
            end_ms,
            segments,
            drained_ms: None,
        };
        seed(voucher.clone()).await?;
        tx.commit().await?;
        Ok(voucher)
    }

    /// One voucher by id.
    pub async fn voucher(&self, id: i64) -> Result<Option<Voucher>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT id, title, stock_total, stock, begin_ms, end_ms, segments, drained_ms \
             FROM vouchers WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| voucher_from_row(&r)).transpose()
    }

    /// Vouchers whose order streams may still hold work: every voucher not
    /// yet marked drained, however long ago its sale ended.
    pub async fn undrained_vouchers(&self) -> Result<Vec<Voucher>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, title, stock_total, stock, begin_ms, end_ms, segments, drained_ms \
             FROM vouchers WHERE drained_ms IS NULL ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(voucher_from_row).collect()
    }

    /// Records that a finished sale's stream is drained: no consumer is
    /// needed for it any more. Returns false when another instance did
    /// first.
    pub async fn mark_drained(&self, voucher_id: i64) -> Result<bool, sqlx::Error> {
        let done =
            sqlx::query("UPDATE vouchers SET drained_ms = $1 WHERE id = $2 AND drained_ms IS NULL")
                .bind(now_ms())
                .bind(voucher_id)
                .execute(&self.pool)
                .await?
                .rows_affected();
        Ok(done == 1)
    }

    /// Clears the drained mark, so consumers start again (after a
    /// dead-letter replay put work back into the stream).
    pub async fn mark_undrained(&self, voucher_id: i64) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE vouchers SET drained_ms = NULL WHERE id = $1")
            .bind(voucher_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Writes one order in one transaction: insert (a duplicate is ignored),
    /// then decrement the database stock if the insert happened, as `guard`
    /// says. Replaying the same order is harmless.
    pub async fn write_order(
        &self,
        order: &Order,
        guard: StockGuard,
    ) -> Result<WriteOutcome, sqlx::Error> {
        self.write_order_checked(order, guard, false).await
    }

    /// [`Db::write_order`] for an order that may have been abandoned
    /// ([`Db::abandon_order`]; the stream pipeline's orders): the write is
    /// refused ([`WriteOutcome::Abandoned`]) if it was. The check costs one
    /// statement under the voucher row lock, so writes that are never
    /// abandoned (the synchronous strategies') skip it.
    pub async fn write_abandonable_order(
        &self,
        order: &Order,
        guard: StockGuard,
    ) -> Result<WriteOutcome, sqlx::Error> {
        self.write_order_checked(order, guard, true).await
    }

    async fn write_order_checked(
        &self,
        order: &Order,
        guard: StockGuard,
        may_be_abandoned: bool,
    ) -> Result<WriteOutcome, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO orders (id, voucher_id, user_id, created_ms, guarded) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(order.id)
        .bind(order.voucher_id)
        .bind(order.user_id)
        .bind(now_ms())
        .bind(i64::from(guard == StockGuard::Enforce))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            let holder = sqlx::query("SELECT voucher_id, user_id FROM orders WHERE id = $1")
                .bind(order.id)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| Ok::<_, sqlx::Error>((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?)))
                .transpose()?;
            tx.rollback().await?;
            return Ok(match holder {
                Some(owner) if owner == (order.voucher_id, order.user_id) => {
                    WriteOutcome::AlreadyWritten
                }
                Some(_) => WriteOutcome::IdTaken,
                None => WriteOutcome::DuplicateUser,
            });
        }
        let decrement = match guard {
            StockGuard::Enforce => {
                "UPDATE vouchers SET stock = stock - 1 WHERE id = $1 AND stock > 0"
            }
            StockGuard::Unguarded => "UPDATE vouchers SET stock = stock - 1 WHERE id = $1",
        };
        let decremented = sqlx::query(decrement)
            .bind(order.voucher_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if decremented == 0 {
            tx.rollback().await?;
            return Ok(WriteOutcome::StockExhausted);
        }
        // The decrement holds the voucher row's lock, which
        // `abandon_order` takes too: checked under it, an abandonment
        // committed before is seen, and one not yet committed waits for
        // this transaction (and then finds the order).
        if may_be_abandoned {
            let abandoned = sqlx::query(
                "SELECT 1 FROM failed_orders WHERE id = $1 AND voucher_id = $2 AND user_id = $3",
            )
            .bind(order.id)
            .bind(order.voucher_id)
            .bind(order.user_id)
            .fetch_optional(&mut *tx)
            .await?;
            if abandoned.is_some() {
                tx.rollback().await?;
                return Ok(WriteOutcome::Abandoned);
            }
        }
        tx.commit().await?;
        Ok(WriteOutcome::Created)
    }

    /// Gives up on an accepted order, for good, unless it is written: the
    /// database decides between this and a write of the same order still
    /// in flight (both take the voucher row's lock; see
    /// [`Db::write_order`]). True when the order is now abandoned (its item
    /// may go back on sale: no write of it will ever commit); false when it
    /// is written.
    pub async fn abandon_order(&self, order: &Order, reason: &str) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE vouchers SET stock = stock WHERE id = $1")
            .bind(order.voucher_id)
            .execute(&mut *tx)
            .await?;
        // Only this very order counts: another order with the same id (the
        // id sequence restarted after Redis lost data) means this one can
        // never be written under it.
        let written =
            sqlx::query("SELECT 1 FROM orders WHERE id = $1 AND voucher_id = $2 AND user_id = $3")
                .bind(order.id)
                .bind(order.voucher_id)
                .bind(order.user_id)
                .fetch_optional(&mut *tx)
                .await?;
        if written.is_some() {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO failed_orders (id, voucher_id, user_id, reason, created_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(order.id)
        .bind(order.voucher_id)
        .bind(order.user_id)
        .bind(reason)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Lifts an abandonment before an operator replays the order (see
    /// `seckill replay-dead-letters`), so its write may commit again.
    pub async fn unabandon_order(&self, order: &Order) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM failed_orders WHERE id = $1 AND voucher_id = $2 AND user_id = $3")
            .bind(order.id)
            .bind(order.voucher_id)
            .bind(order.user_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// True when this very order (id, voucher and buyer) is written.
    pub async fn is_written(&self, order: &Order) -> Result<bool, sqlx::Error> {
        Ok(self.order(order.id).await?.as_ref() == Some(order))
    }

    /// Records an accepted order that will never be written, and why.
    /// Recording the same order twice keeps the first reason.
    pub async fn record_failed(&self, order: &Order, reason: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO failed_orders (id, voucher_id, user_id, reason, created_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(order.id)
        .bind(order.voucher_id)
        .bind(order.user_id)
        .bind(reason)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A written order by id.
    pub async fn order(&self, id: i64) -> Result<Option<Order>, sqlx::Error> {
        let row = sqlx::query("SELECT id, voucher_id, user_id FROM orders WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| order_from_row(&r)).transpose()
    }

    /// The reason a failed order failed, by id.
    pub async fn failed_order(&self, id: i64) -> Result<Option<(Order, String)>, sqlx::Error> {
        let row =
            sqlx::query("SELECT id, voucher_id, user_id, reason FROM failed_orders WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| Ok((order_from_row(&r)?, r.try_get(3)?)))
            .transpose()
    }

    /// Every written order of a voucher, oldest id first.
    pub async fn orders_of(&self, voucher_id: i64) -> Result<Vec<Order>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, voucher_id, user_id FROM orders WHERE voucher_id = $1 ORDER BY id",
        )
        .bind(voucher_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(order_from_row).collect()
    }

    /// One page of a voucher's written orders, by id, after `after`
    /// (exclusive), at most `limit`.
    pub async fn orders_page(
        &self,
        voucher_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Order>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, voucher_id, user_id FROM orders WHERE voucher_id = $1 AND id > $2 \
             ORDER BY id LIMIT $3",
        )
        .bind(voucher_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(order_from_row).collect()
    }

    /// How many orders a voucher has in the database.
    pub async fn order_count(&self, voucher_id: i64) -> Result<i64, sqlx::Error> {
        let row = sqlx::query("SELECT COUNT(*) FROM orders WHERE voucher_id = $1")
            .bind(voucher_id)
            .fetch_one(&self.pool)
            .await?;
        row.try_get(0)
    }

    /// A user's written orders for a voucher (more than one only for the
    /// racy strategies), oldest first.
    pub async fn orders_of_user(
        &self,
        voucher_id: i64,
        user_id: i64,
    ) -> Result<Vec<Order>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, voucher_id, user_id FROM orders WHERE voucher_id = $1 AND user_id = $2 \
             ORDER BY id",
        )
        .bind(voucher_id)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(order_from_row).collect()
    }

    /// A user's failed orders for a voucher, with the reasons.
    pub async fn failed_of_user(
        &self,
        voucher_id: i64,
        user_id: i64,
    ) -> Result<Vec<(Order, String)>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, voucher_id, user_id, reason FROM failed_orders \
             WHERE voucher_id = $1 AND user_id = $2 ORDER BY id",
        )
        .bind(voucher_id)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((order_from_row(r)?, r.try_get(3)?)))
            .collect()
    }

    /// The users holding an order for a voucher (re-seeding the buyer set).
    pub async fn buyers_of(&self, voucher_id: i64) -> Result<Vec<i64>, sqlx::Error> {
        let rows = sqlx::query("SELECT DISTINCT user_id FROM orders WHERE voucher_id = $1")
            .bind(voucher_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    /// How many failed orders a voucher has.
    pub async fn failed_count(&self, voucher_id: i64) -> Result<i64, sqlx::Error> {
        let row = sqlx::query("SELECT COUNT(*) FROM failed_orders WHERE voucher_id = $1")
            .bind(voucher_id)
            .fetch_one(&self.pool)
            .await?;
        row.try_get(0)
    }

    /// True when the database answers.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Pooled connections idle right now. A connection a query has just
    /// finished with counts only once the pool has checked it on release
    /// (a round trip to the database, in a task of its own).
    pub fn idle_connections(&self) -> usize {
        self.pool.num_idle()
    }

    /// Pooled connections open right now, idle or in use.
    pub fn open_connections(&self) -> usize {
        self.pool.size() as usize
    }

    /// Closes the pool, waiting for connections in use.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn voucher_from_row(r: &sqlx::any::AnyRow) -> Result<Voucher, sqlx::Error> {
    Ok(Voucher {
        id: r.try_get(0)?,
        title: r.try_get(1)?,
        stock_total: r.try_get(2)?,
        stock: r.try_get(3)?,
        begin_ms: r.try_get(4)?,
        end_ms: r.try_get(5)?,
        segments: r.try_get(6)?,
        drained_ms: r.try_get(7)?,
    })
}

fn order_from_row(r: &sqlx::any::AnyRow) -> Result<Order, sqlx::Error> {
    Ok(Order {
        id: r.try_get(0)?,
        voucher_id: r.try_get(1)?,
        user_id: r.try_get(2)?,
    })
}
